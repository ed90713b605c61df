"""Shared pieces of the fuzz suite: small trained tokenizers, JSON value strategies, checks.

The fuzz tests feed textproc random and hostile input at every boundary where bytes or JSON
from outside arrive (tokenizer files, chat templates and messages, JSON schemas, stop lists,
engine token ids, frames on sockets, model output). The rule each test checks: the call either
gives a defined result or raises the one textproc error that boundary documents (with a message
that says where); any other exception (KeyError, TypeError, IndexError, RecursionError...) is a
bug. Example counts come from the TEXTPROC_MAX_EXAMPLES hypothesis profile in tests/conftest.py;
a deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz`` (also runs
the 1M-entry vocabulary case, else ``-m slow``). Coverage-guided long runs with atheris are a
separate command: ``scripts/fuzz_atheris.py`` (its docstring).

Files: ``test_fuzz_tokenizer_files`` (tokenizer.json / config files), ``test_fuzz_frames`` (every
socket's decoder, the worker's RequestBuilder, the detokenizer core, EngineLink on ipc),
``test_fuzz_chat`` (templates, payloads, messages/tools), ``test_fuzz_constraints`` (JSON schemas,
tools), ``test_fuzz_stream`` (stops, engine ids, hostile text, parsers), and
``test_fuzz_atheris_targets`` (keeps the atheris targets runnable). Bugs in files owned by
others are pinned by ``xfail(strict=True)`` tests naming the owner; fixed ones became plain
regression tests.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest
from hypothesis import strategies as st

__all__ = [
    "json_values",
    "json_scalars",
    "hostile_text",
    "small_tokenizer_json",
    "SMALL_KINDS",
    "FUZZ_TEXTS",
    "require_deep_run",
]

FUZZ_TEXTS = [
    "Hello world, this is a tiny corpus. ",
    "naïve café déjà vu 你好世界 😀 emoji 👍🏽 👨‍👩‍👧 text",
    "def f(x):\n    return x + 1\n\t\r\n",
    "Stop here. STOP! <think>hmm</think> <tool_call>{\"a\": 1}</tool_call>",
    "ещё немного текста и العربية 123 4567 ",
]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)

# text with the characters that break naive code: surrogates, NUL, controls, combining marks,
# RTL, emoji sequences, noncharacters, the SentencePiece space, byte-token lookalikes
hostile_text = st.lists(
    st.one_of(
        st.text(max_size=6),
        st.sampled_from(["\ud800", "\udfff", "\x00", "\ufffd", "\ufeff", "\u200d", "\U0010ffff",
                         "\u0301", "▁", "<0xE2>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                         "<tool_call>", "</tool_call>", "\r\n", " ", "  ", "\n\n", "😀", "a\u0308"]),
    ),
    max_size=8,
).map("".join)


SMALL_KINDS = ("bytelevel", "sp_bpe", "unigram")


@functools.cache
def _trained(kind: str) -> str:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers

    texts = FUZZ_TEXTS * 8
    if kind == "bytelevel":
        hf = Tokenizer(models.BPE())
        hf.normalizer = normalizers.NFC()
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        hf.decoder = decoders.ByteLevel()
        hf.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=["<|endoftext|>"], show_progress=False)
        hf.train_from_iterator(texts, trainer)
        hf.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                               AddedToken("<|im_end|>", special=True, normalized=False)])
        hf.add_tokens([AddedToken("<think>", special=False, normalized=False),
                       AddedToken("</think>", special=False, normalized=False),
                       AddedToken("<tool_call>", special=False, normalized=True)])
    elif kind == "sp_bpe":
        hf = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        trainer = trainers.BpeTrainer(
            vocab_size=340, show_progress=False, limit_alphabet=60,
            special_tokens=["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)])
        hf.train_from_iterator(texts, trainer)
        hf.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                          special_tokens=[("<s>", 1)])
    elif kind == "unigram":
        hf = Tokenizer(models.Unigram())
        hf.normalizer = normalizers.NFKC()
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        hf.decoder = decoders.Sequence([decoders.ByteFallback(),
                                        decoders.Metaspace(replacement="▁", prepend_scheme="always")])
        trainer = trainers.UnigramTrainer(vocab_size=120, show_progress=False, unk_token="<unk>",
                                          special_tokens=["<unk>", "<s>", "</s>"])
        hf.train_from_iterator([t for t in texts if t.isascii()], trainer)
    else:
        raise ValueError(kind)
    return str(hf.to_str())


def small_tokenizer_json(kind: str) -> dict[str, Any]:
    """A fresh (mutable) tokenizer.json object of a tiny tokenizer trained now with ``tokenizers``."""
    result: dict[str, Any] = json.loads(_trained(kind))
    return result


def require_deep_run(request: pytest.FixtureRequest) -> None:
    """Skip unless the run asked for depth: ``-m slow`` or TEXTPROC_MAX_EXAMPLES >= 1000."""
    markexpr = request.config.option.markexpr or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        return
    if int(os.environ.get("TEXTPROC_MAX_EXAMPLES", "100")) >= 1000:
        return
    pytest.skip("long fuzz case: run with -m slow or TEXTPROC_MAX_EXAMPLES>=1000")
