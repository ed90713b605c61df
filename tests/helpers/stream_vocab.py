"""Toy vocabularies for the streaming tests (detokenizer, stops, pipeline), trained now with HF tokenizers.

``byte_level_hf()`` is a tiny GPT-2-style byte-level BPE, ``byte_fallback_hf()`` a tiny
SentencePiece-style BPE (Metaspace "▁", ``<0xNN>`` byte fallback, decoder
Replace/ByteFallback/Fuse/Strip as in Llama/Mistral tokenizer.json files). Both carry special
tokens. ``textproc_vocab(hf)`` loads the same tokenizer.json into ``textproc.Tokenizer``;
``real_vocab(name)`` returns (textproc.Tokenizer, HF tokenizers.Tokenizer) for a real
vocabulary or skips.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

__all__ = ["byte_level_hf", "byte_fallback_hf", "textproc_vocab", "real_vocab", "SAMPLE_TEXTS"]

SAMPLE_TEXTS = [
    "Hello world, this is a tiny corpus. ",
    "naïve café déjà vu 你好世界 😀 emoji 👍🏽 👨‍👩‍👧 text",
    "def f(x):\n    return x + 1\n",
    "Stop here. STOP! <think>hmm</think> <tool_call>{\"a\": 1}</tool_call>",
    "ещё немного текста и العربية",
]


@functools.cache
def byte_level_hf() -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SAMPLE_TEXTS * 20, trainer)
    tok.add_tokens(["<think>", "</think>"])  # non-special added tokens, as in Qwen3
    return tok


@functools.cache
def byte_fallback_hf() -> HFTokenizer:
    tok = HFTokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(
        vocab_size=260, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train_from_iterator(SAMPLE_TEXTS * 20, trainer)
    obj = json.loads(tok.to_str())
    vocab: dict[str, int] = obj["model"]["vocab"]
    base = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = base + b
    obj["model"]["byte_fallback"] = True
    obj["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    return HFTokenizer.from_str(json.dumps(obj))


def textproc_vocab(hf: HFTokenizer) -> Any:
    """The same tokenizer.json loaded by textproc.Tokenizer."""
    return _load(hf.to_str())


@functools.cache
def _load(source: str) -> Any:
    from textproc.core.tokenizer import Tokenizer

    return Tokenizer.from_json(json.loads(source), source="<toy>")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printed char -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@functools.cache
def real_vocab(name: str) -> tuple[Any, HFTokenizer]:
    from tests.helpers.models import model_dir

    path = model_dir(name)
    from textproc.core.tokenizer import Tokenizer

    return Tokenizer.from_dir(path), HFTokenizer.from_file(str(path / "tokenizer.json"))
