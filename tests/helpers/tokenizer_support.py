"""Shared helpers for the tokenizer tests: deterministic mixed text and reference tokenizers.

The reference is HF ``tokenizers``; tokenizers are trained here on generated text (small
vocabularies, well under a second each) and cached per process.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from textproc.core.tokenizer import Tokenizer  # noqa: E402

__all__ = ["QWEN_PATTERN", "mixed_texts", "assert_parity", "trained", "hf_from_obj"]

QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

WORDS = (
    "the quick brown fox jumps over lazy dog Hello World don't I'm we'll they've HE'S SHE'LL "
    "DON'T Can't def class return import from self print lambda async await None True False "
    "naïve café résumé über straße Ελληνικά ΣΊΣΥΦΟΣ русский язык العربية עברית हिन्दी ไทย "
    "中文 日本語 ひらがな カタカナ 한국어 😀 👩‍👩‍👧‍👦 🇫🇷 👍🏽 e\u0301 n\u0303 Å A\u030a ﬁ ½ ²"
).split(" ")
PUNCT = list(".,;:!?()[]{}<>\"'`~@#$%^&*-_=+/\\|") + ["...", "->", "::", "==", "▁", "##"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "   ", " \n ", "\u00a0", "\u3000", "\x0b", "\x1c", "\x85", "\u2028"]
LOOKALIKES = [
    "<|im_start|>", "<|endoftext|>", "<think>", "</think>", "<s>", "</s>", "<unk>", "<|im_end",
    "<<|im_start|>>", " <think> ", "<0x41>", "[CLS]", "<tool_call>",
]


def mixed_texts(seed: int, n: int, max_parts: int = 30) -> list[str]:
    """``n`` deterministic strings mixing scripts, emoji, whitespace runs, digits, lookalikes."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts: list[str] = []
        for _ in range(rng.randint(0, max_parts)):
            r = rng.random()
            if r < 0.55:
                w = rng.choice(WORDS)
                if rng.random() < 0.1:
                    w = w.upper()
            elif r < 0.7:
                w = rng.choice(PUNCT)
            elif r < 0.8:
                w = str(rng.randint(0, 10 ** rng.randint(1, 14)))
            elif r < 0.9:
                w = rng.choice(SPACES)
            elif r < 0.95:
                cp = rng.choice(
                    [rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xFFFF),
                     rng.randint(0x10000, 0x1FFFF), rng.randint(0, 0x1F)]
                )
                w = "x" if 0xD800 <= cp < 0xE000 else chr(cp)
            else:
                w = rng.choice(LOOKALIKES)
            parts.append(w)
            if rng.random() < 0.6:
                parts.append(" ")
        out.append("".join(parts))
    return out


def hf_from_obj(obj: dict[str, Any]) -> Any:
    return tokenizers.Tokenizer.from_str(json.dumps(obj))


def assert_parity(
    obj: dict[str, Any], texts: Sequence[str], *, add_special_tokens: Sequence[bool] = (False,), label: str = ""
) -> Tokenizer:
    """Encode + decode of every text equal to the reference; returns the textproc tokenizer."""
    ref = hf_from_obj(obj)
    tok = Tokenizer.from_json(obj, source=label or "<test>")
    bad: list[str] = []
    for text in texts:
        for add in add_special_tokens:
            want = ref.encode(text, add_special_tokens=add).ids
            got = tok.encode(text, add_special_tokens=add)
            if want != got:
                bad.append(f"encode {text!r} add={add}: want {want} got {got}")
                continue
            for skip in (False, True):
                dw = ref.decode(want, skip_special_tokens=skip)
                dg = tok.decode(want, skip_special_tokens=skip)
                if dw != dg:
                    bad.append(f"decode {want} skip={skip}: want {dw!r} got {dg!r}")
        if len(bad) > 5:
            break
    assert not bad, f"{label}: {len(bad)} mismatches, first: " + "\n".join(bad[:5])
    assert tok.vocab_size == ref.get_vocab_size(with_added_tokens=True), label
    return tok


@functools.cache
def trained(kind: str) -> str:
    """JSON text of a tokenizer trained with ``tokenizers``: qwen, gpt2, gpt2_prefix, sp_bpe, unigram."""
    specials = ["<|endoftext|>"]
    if kind in ("qwen", "gpt2", "gpt2_prefix"):
        hf = tokenizers.Tokenizer(models.BPE())
        if kind == "qwen":
            hf.normalizer = normalizers.NFC()
            hf.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
            )
        else:
            hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=kind == "gpt2_prefix")
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False, special_tokens=specials,
        )
        hf.train_from_iterator(mixed_texts(1, 2500), trainer)
        hf.add_special_tokens(
            [AddedToken("<|im_start|>", special=True, normalized=False),
             AddedToken("<|im_end|>", special=True, normalized=False)]
        )
        hf.add_tokens(
            [AddedToken("<think>", special=False, normalized=False),
             AddedToken("</think>", special=False, normalized=False),
             AddedToken("<tool_call>", special=False, normalized=True)]
        )
    elif kind == "sp_bpe":
        hf = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        hf.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(
            vocab_size=1200, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
            limit_alphabet=150,
        )
        hf.train_from_iterator(mixed_texts(3, 2500), trainer)
        hf.post_processor = tokenizers.processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    elif kind == "unigram":
        hf = tokenizers.Tokenizer(models.Unigram())
        hf.normalizer = normalizers.NFKC()
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        hf.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="always")])
        byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.UnigramTrainer(
            vocab_size=1500, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
            unk_token="<unk>",
        )
        # ordinary words only, so rare characters are left to byte fallback / unk
        hf.train_from_iterator([" ".join(WORDS + PUNCT)] * 50 + [t for t in mixed_texts(4, 600) if t.isascii()], trainer)
        obj = json.loads(hf.to_str())
        obj["model"]["byte_fallback"] = True
        return json.dumps(obj)
    else:
        raise ValueError(kind)
    return str(hf.to_str())


def trained_obj(kind: str) -> dict[str, Any]:
    """A fresh dict of the trained tokenizer ``kind`` (safe to mutate)."""
    result: dict[str, Any] = json.loads(trained(kind))
    return result
