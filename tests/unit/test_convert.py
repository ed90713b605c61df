"""textproc.core.convert against tiktoken and HF tokenizers: rank files, merges, tokenizer.json."""

from __future__ import annotations

import base64
import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tokenizers
from hypothesis import given
from hypothesis import strategies as st

from textproc.testing.corpus import EDGE_CASES, REFERENCE_REFUSES, fast_items
from tests.helpers.models import model_dir
from textproc.core.convert import (
    BYTES_TO_UNICODE,
    load_tiktoken_ranks,
    parse_tiktoken_ranks,
    ranks_to_merges,
    tiktoken_to_tokenizer_json,
    token_to_unicode,
    unreachable_tokens,
)
from textproc.errors import TokenizerFileError

QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _write_ranks(path: Path, ranks: dict[bytes, int]) -> Path:
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    path.write_text("\n".join(lines) + "\n")
    return path


def _byte_ranks() -> dict[bytes, int]:
    return {bytes([b]): b for b in range(256)}


def _hf(obj: dict[str, Any]) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_str(json.dumps(obj))


# --------------------------------------------------------------------------------- byte table


def test_byte_table_is_tokenizers_alphabet() -> None:
    assert len(set(BYTES_TO_UNICODE.values())) == 256
    assert set(BYTES_TO_UNICODE.values()) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    assert token_to_unicode(b" hello\n") == "ĠhelloĊ"


# --------------------------------------------------------------------------------- rank files


def test_load_equals_tiktoken_loader(tmp_path: Path) -> None:
    ranks = _byte_ranks() | {b"ab": 256, b" the": 257, "é".encode(): 258}
    path = _write_ranks(tmp_path / "toy.tiktoken", ranks)
    with open(path, "a") as f:
        f.write("\n\n")  # blank lines are skipped, as tiktoken does
    assert load_tiktoken_ranks(path) == tiktoken.load.load_tiktoken_bpe(str(path)) == ranks


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("YWI= x", "rank 'x' is not an integer"),
        ("YWI=", "expected 'base64-token rank'"),
        ("YWI= 1 2", "expected 'base64-token rank'"),
        ("!!!! 300", "is not valid base64"),
        ("YWI= -4", "rank -4 is negative"),
        ("AA== 300", "already has rank 0"),
        ("YWI= 3", "rank 3 already used on line 4"),
    ],
)
def test_load_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write_ranks(tmp_path / "bad.tiktoken", _byte_ranks())
    with open(path, "a") as f:
        f.write(line + "\n")
    with pytest.raises(TokenizerFileError) as info:
        load_tiktoken_ranks(path)
    assert f"{path}:257:" in str(info.value)
    assert message in str(info.value)


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(TokenizerFileError, match="nope.tiktoken"):
        load_tiktoken_ranks(tmp_path / "nope.tiktoken")


def test_parse_names_source() -> None:
    with pytest.raises(TokenizerFileError, match=r"^mem:2: "):
        parse_tiktoken_ranks(b"AA== 0\nbroken\n", source="mem")


# --------------------------------------------------------------------------------- merges


def test_merges_follow_bpe_over_lower_ranks() -> None:
    ranks = _byte_ranks() | {b"bc": 256, b"ab": 257, b"abc": 258, b"abcd": 259}
    # "abc": BPE over ranks < 258 merges "bc" (256) first, so the merge is (a, bc), not (ab, c)
    assert ranks_to_merges(ranks) == [(b"b", b"c"), (b"a", b"b"), (b"a", b"bc"), (b"abc", b"d")]
    assert unreachable_tokens(ranks) == []


def test_unreachable_tokens_set_ignore_merges() -> None:
    ranks = _byte_ranks() | {b"ab": 256, b"xyz": 257, b"abab": 258}
    assert unreachable_tokens(ranks) == [b"xyz"]
    assert ranks_to_merges(ranks) == [(b"a", b"b"), (b"ab", b"ab")]
    obj = tiktoken_to_tokenizer_json(ranks, QWEN_PATTERN, {})
    assert obj["model"]["ignore_merges"] is True
    hf = _hf(obj)
    enc = tiktoken.Encoding("toy", pat_str=QWEN_PATTERN, mergeable_ranks=ranks, special_tokens={})
    for text in ("xyz", "xyzw", " xyz", "ababxyz", "abab"):
        assert hf.encode(text).ids == enc.encode(text)


def test_missing_single_byte_is_refused() -> None:
    ranks = {bytes([b]): b for b in range(255)}
    with pytest.raises(TokenizerFileError, match=r"b'\\xff'"):
        ranks_to_merges(ranks)


# --------------------------------------------------------------------------------- tokenizer.json


@pytest.fixture(scope="module")
def trained_ranks() -> dict[bytes, int]:
    """Byte-level ranks of a small BPE trained with tokenizers on corpus text."""
    from textproc.core.convert import UNICODE_TO_BYTES

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(QWEN_PATTERN), "isolated"),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text for _, text in fast_items(150_000)], trainer)
    vocab = tok.get_vocab()
    ranks: dict[bytes, int] = {}
    for token, token_id in sorted(vocab.items(), key=lambda kv: kv[1]):
        ranks[bytes(UNICODE_TO_BYTES[c] for c in token)] = len(ranks)
    return ranks


def test_layout(trained_ranks: dict[bytes, int]) -> None:
    obj = tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {"<|end|>": 1500}, nfc=True)
    assert obj["normalizer"] == {"type": "NFC"}
    assert obj["pre_tokenizer"]["pretokenizers"][0] == {
        "type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False,
    }
    assert obj["pre_tokenizer"]["pretokenizers"][1]["type"] == "ByteLevel"
    assert obj["pre_tokenizer"]["pretokenizers"][1]["use_regex"] is False
    assert obj["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] is False
    assert obj["decoder"]["type"] == "ByteLevel"
    assert obj["model"]["type"] == "BPE"
    assert obj["model"]["ignore_merges"] is False
    assert obj["added_tokens"] == [{
        "id": 1500, "content": "<|end|>", "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": False, "special": True,
    }]
    assert "<|end|>" not in obj["model"]["vocab"]  # consecutive: tokenizers numbers it itself
    assert tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {})["normalizer"] is None


def test_added_tokens_flags_and_gaps(trained_ranks: dict[bytes, int]) -> None:
    added = [
        {"content": "<think>", "id": 1503, "special": False},
        {"content": "<pad>", "id": 1510, "special": True, "lstrip": True},
    ]
    obj = tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {"<|end|>": 1500},
                                     added_tokens=added)
    hf = _hf(obj)
    # ids with gaps survive because they are also in model.vocab
    assert hf.token_to_id("<|end|>") == 1500
    assert hf.token_to_id("<think>") == 1503
    assert hf.token_to_id("<pad>") == 1510
    by_content = {t["content"]: t for t in obj["added_tokens"]}
    assert by_content["<think>"]["special"] is False
    assert by_content["<pad>"]["lstrip"] is True
    ids = hf.encode("a<think>b <pad>").ids
    assert 1503 in ids and 1510 in ids
    assert hf.decode(ids, skip_special_tokens=True) == "a<think>b"


def test_added_token_errors(trained_ranks: dict[bytes, int]) -> None:
    with pytest.raises(TokenizerFileError, match="share id 1500"):
        tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {"<a>": 1500, "<b>": 1500})
    with pytest.raises(TokenizerFileError, match="collides with a rank"):
        tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {"<a>": 7})
    with pytest.raises(TokenizerFileError, match="unknown keys"):
        tiktoken_to_tokenizer_json(trained_ranks, QWEN_PATTERN, {},
                                   added_tokens=[{"content": "x", "id": 1500, "speshul": True}])


@pytest.fixture(scope="module")
def toy_pair(trained_ranks: dict[bytes, int]) -> tuple[tokenizers.Tokenizer, tiktoken.Encoding]:
    ranks = trained_ranks
    specials = {"<|end|>": len(ranks)}
    hf = _hf(tiktoken_to_tokenizer_json(ranks, QWEN_PATTERN, specials, nfc=True))
    enc = tiktoken.Encoding("toy", pat_str=QWEN_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    return hf, enc


def test_trained_vocab_matches_tiktoken_on_corpus(
    toy_pair: tuple[tokenizers.Tokenizer, tiktoken.Encoding],
) -> None:
    hf, enc = toy_pair
    texts = [t for n, t in EDGE_CASES.items() if n not in REFERENCE_REFUSES]
    texts += [t for _, t in fast_items(60_000)]
    for text in texts:
        text = unicodedata.normalize("NFC", text)
        assert hf.encode(text).ids == enc.encode(text, allowed_special="all"), text[:80]


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60))
def test_trained_vocab_matches_tiktoken_hypothesis(
    toy_pair: tuple[tokenizers.Tokenizer, tiktoken.Encoding], text: str
) -> None:
    hf, enc = toy_pair
    text = unicodedata.normalize("NFC", text)
    assert hf.encode(text).ids == enc.encode(text, allowed_special="all")


# --------------------------------------------------------------------------------- real files


def test_gpt2_merges_reproduce_vocab_bpe() -> None:
    """ranks_to_merges on GPT-2's encoder.json gives exactly the merges of vocab.bpe."""
    from textproc.core.convert import UNICODE_TO_BYTES

    obj = json.loads((model_dir("gpt2") / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = obj["model"]["vocab"]
    ranks = {bytes(UNICODE_TO_BYTES[c] for c in t): i for t, i in vocab.items() if t != "<|endoftext|>"}
    derived = [[token_to_unicode(a), token_to_unicode(b)] for a, b in ranks_to_merges(ranks)]
    assert derived == [list(m) for m in obj["model"]["merges"]]


def test_qwen_rank_file_converts_like_tiktoken() -> None:
    path = model_dir("qwen3") / "qwen.tiktoken"
    ranks = load_tiktoken_ranks(path)
    assert len(ranks) == 151_643
    specials = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
    obj = tiktoken_to_tokenizer_json(ranks, QWEN_PATTERN, specials, nfc=True)
    assert len(obj["model"]["merges"]) == 151_643 - 256
    hf = _hf(obj)
    enc = tiktoken.Encoding("qwen", pat_str=QWEN_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    for _, text in fast_items(80_000):
        text = unicodedata.normalize("NFC", text)
        assert hf.encode(text).ids == enc.encode(text, allowed_special="all"), text[:80]
