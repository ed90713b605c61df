"""Parity with HF ``tokenizers`` on tokenizers trained in the test (ids and decoded text)."""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.tokenizer_support import assert_parity, mixed_texts, trained_obj
from textproc.core.tok.bpe import BPE
from textproc.core.tok.bytelevel import to_byte_level
from textproc.core.tokenizer import Tokenizer


@pytest.mark.parametrize("kind", ["qwen", "gpt2", "gpt2_prefix"])
def test_byte_level_bpe_matches_reference(kind: str) -> None:
    assert_parity(trained_obj(kind), mixed_texts(11, 400), add_special_tokens=(False, True), label=kind)


def test_qwen_style_long_word_and_whitespace() -> None:
    texts = ["a" * 5000, "ab" * 3000 + " " * 300 + "\n" * 50, "x" + "\t \n" * 200, "🙂" * 500, ""]
    assert_parity(trained_obj("qwen"), texts, label="qwen-long")


def test_sentencepiece_style_bpe_matches_reference() -> None:
    # Prepend/Replace normalizers, byte_fallback + fused unk, Llama-2 decoder chain, <s> template
    assert_parity(trained_obj("sp_bpe"), mixed_texts(12, 400), add_special_tokens=(False, True), label="sp_bpe")


def test_unigram_matches_reference() -> None:
    assert_parity(trained_obj("unigram"), mixed_texts(13, 300), add_special_tokens=(False, True), label="unigram")


def test_merges_as_strings_and_ignore_merges() -> None:
    obj = trained_obj("gpt2")
    obj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in obj["model"]["merges"]]
    assert_parity(obj, mixed_texts(14, 150), label="string merges")
    # ignore_merges: a whole piece found in the vocab wins, even one merges cannot reach
    obj["model"]["ignore_merges"] = True
    obj["model"]["vocab"]["Ġunreachableword"] = len(obj["model"]["vocab"])
    texts = mixed_texts(15, 150) + [" unreachableword and unreachablewords", "hello"]
    assert_parity(obj, texts, label="ignore_merges")


@pytest.mark.parametrize("fuse_unk", [True, False])
@pytest.mark.parametrize("byte_fallback", [True, False])
def test_unk_and_byte_fallback_variants(fuse_unk: bool, byte_fallback: bool) -> None:
    obj = trained_obj("sp_bpe")
    obj["model"]["fuse_unk"] = fuse_unk
    obj["model"]["byte_fallback"] = byte_fallback
    # drop a few byte tokens so fallback sometimes fails and unk takes over
    for b in (0x80, 0x9F, 0xE4):
        obj["model"]["vocab"].pop(f"<0x{b:02X}>", None)
        obj["added_tokens"] = [t for t in obj["added_tokens"] if t["content"] != f"<0x{b:02X}>"]
    texts = mixed_texts(16, 150) + ["中文 日本語 ÿ€ unk unk ᐴᐴ x", "\u0400\u0401 a\u0480b"]
    assert_parity(obj, texts, add_special_tokens=(False, True), label=f"fuse_unk={fuse_unk} fallback={byte_fallback}")


def test_continuing_subword_prefix_and_end_of_word_suffix() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    for prefix, suffix in (("##", None), (None, "</w>"), ("##", "</w>")):
        options = {k: v for k, v in (("continuing_subword_prefix", prefix), ("end_of_word_suffix", suffix)) if v}
        hf = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]", **options))
        hf.pre_tokenizer = pre_tokenizers.Whitespace()
        if suffix:
            hf.decoder = decoders.BPEDecoder(suffix=suffix)
        trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False, special_tokens=["[UNK]"], **options)
        hf.train_from_iterator([t for t in mixed_texts(17, 800) if t.isascii()], trainer)
        import json

        assert_parity(json.loads(hf.to_str()), mixed_texts(18, 150), label=f"prefix={prefix} suffix={suffix}")


def test_long_words_match_reference() -> None:
    # long words take the chunked path (chunk results joined at compatible boundaries)
    rng = random.Random(3)
    texts = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20_000)),
        "".join(rng.choice("abcdeABCDE") for _ in range(5_000)),
        "".join(chr(rng.randint(0x4E00, 0x4F00)) for _ in range(3_000)),
        "".join(rng.choice(["the", "an", "tokenizer", "é", "ß"]) for _ in range(3_000)),
        "ab" * 5000 + "x",
    ]
    for kind in ("qwen", "gpt2", "sp_bpe"):
        assert_parity(trained_obj(kind), texts, label=f"long words {kind}")


@given(st.text(alphabet="abcdefgh éß中", min_size=96, max_size=400))
def test_chunked_merge_equals_heap_merge(word: str) -> None:
    tok = _qwen_tokenizer()
    model = tok._model
    assert isinstance(model, BPE)
    mapped = to_byte_level(word.replace(" ", ""))
    ids = model._initial(mapped)
    if len(ids) < 2:
        return
    chunked = model._merge_chunked(mapped, list(ids))
    assert chunked is None or chunked == model._merge_heap(list(ids)) == model._merge_small(list(ids))


@functools.cache
def _qwen_tokenizer() -> Tokenizer:
    return Tokenizer.from_json(trained_obj("qwen"))
