"""Cutting one long text into parts that encode apart (core/tok/parts.py) is exact: on the real
vocabularies and the trained ones, any plan's parts, encoded apart and assembled, give HF
``tokenizers``' ids of the whole text, and every cut the cutter picks splits a stretch into two
that encode to the stretch's ids. Tokenizers whose cuts are not proven get no cut inside a
stretch."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textproc.testing.corpus import fast_items
from tests.helpers.references import CASE_NAMES, get_case, trained_json
from textproc.core.tok.parts import CUT_SEARCH_CHARS, Cutter
from textproc.core.tok.segments import SegmentCache
from textproc.core.tokenizer import Tokenizer

PIECES = [text for _, text in fast_items(long_words=True) if text]
KINDS = {"qwen3": "pieces", "gpt2": "pieces", "cl100k": "pieces", "deepseek": "pieces",
         "mistral": "words", "trained-qwen": "pieces", "trained-gpt2": "pieces",
         "trained-spm": "segments", "trained-unigram": "segments"}


def _text(rng: random.Random, n_chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_chars:
        piece = rng.choice(PIECES)
        start = rng.randrange(len(piece))
        piece = piece[start:start + rng.randint(1, 6000)]
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _encode_plan(tok: Tokenizer, text: str, n_parts: int, min_part_chars: int,
                 add_special_tokens: bool) -> tuple[list[int], int]:
    plan = tok.plan_parts(text, n_parts, min_part_chars=min_part_chars,
                          add_special_tokens=add_special_tokens)
    # the parts in reverse order, as different processes would finish them
    results = [tok.encode_units(part, at_start=plan.at_start and k == 0)
               for k, part in reversed(list(enumerate(plan.parts)))]
    return plan.assemble(results[::-1]), len(plan.parts)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_each_tokenizer_gets_the_cutter_its_components_prove(name: str) -> None:
    assert get_case(name).ours.cutter.kind == KINDS[name]


@pytest.mark.parametrize("name", CASE_NAMES)
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_any_plan_assembles_to_the_reference_ids_of_the_whole(name: str, seed: int) -> None:
    case = get_case(name)
    tok = case.ours
    tok.segment_cache = SegmentCache(max_bytes=1 << 20, min_chars=64)
    rng = random.Random(seed)
    text = _text(rng, rng.randint(2_000, 40_000))
    add_special = rng.random() < 0.3
    n_parts, min_part = rng.randint(2, 9), rng.choice([64, 512, 4096])
    want = case.hf.encode(text, add_special_tokens=add_special).ids
    got, n = _encode_plan(tok, text, n_parts, min_part, add_special)
    assert got == want, f"{name} seed {seed}: {n} parts"
    # again: now the segment cache answers part of it, and the plan must still be exact
    assert _encode_plan(tok, text, n_parts, min_part, add_special)[0] == want, f"{name} seed {seed}"


@pytest.mark.parametrize("name", [n for n, kind in KINDS.items() if kind != "segments"])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_cut_the_cutter_picks_encodes_as_the_whole(name: str, seed: int) -> None:
    tok = get_case(name).ours
    tok.segment_cache = SegmentCache(max_bytes=0)
    rng = random.Random(seed)
    plan = tok.plan_parts(_text(rng, 12_000), 1)
    units = [u for part in plan.parts for u in part]
    cuts = 0
    for unit in units:
        if len(unit) < 2:
            continue
        [whole] = tok.encode_units([unit])
        for _ in range(8):
            cut = tok.cutter.cut_near(unit, rng.randrange(1, len(unit)))
            if cut is None:
                continue
            assert 0 < cut < len(unit)
            left, right = tok.encode_units([unit[:cut], unit[cut:]])
            assert left + right == whole, f"{name} seed {seed}: cut at {cut}: {unit[cut - 20:cut + 20]!r}"
            cuts += 1
    assert cuts or not any(" " in u or "\u2581" in u for u in units)


def test_an_unproven_split_regex_gets_no_cut_inside_a_stretch() -> None:
    obj = json.loads(trained_json("trained-qwen"))
    obj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+|."
    assert Tokenizer.from_json(obj).cutter.kind == "segments"
    obj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+"
    assert Tokenizer.from_json(obj).cutter.kind == "segments"


def test_a_vocabulary_joining_a_character_and_a_later_mark_gets_no_word_cut() -> None:
    vocab = {"a": 0, "\u2581": 1, "\u2581a": 2, "a\u2581": 3}
    obj = {"model": {"type": "BPE", "vocab": vocab, "merges": ["\u2581 a", "a \u2581"]},
           "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
           "pre_tokenizer": None, "added_tokens": []}
    assert Tokenizer.from_json(obj).cutter.kind == "segments"
    del vocab["a\u2581"]
    obj["model"]["merges"] = ["\u2581 a"]
    tok = Tokenizer.from_json(obj)
    assert tok.cutter.kind == "words"
    assert tok.encode("a a aa") == [0, 2, 2, 0]


def test_cutter_cuts_before_a_space_and_letter_or_not_at_all() -> None:
    pieces = Cutter("pieces")
    assert pieces.cut_near("hello big world", 7) == 9
    assert pieces.cut_near("hello big world", 2) == 5
    assert pieces.cut_near("12345 67890", 3) is None
    assert Cutter("segments").cut_near("hello world", 3) is None
    # the letter must be followed by ASCII in the real text (no normalizer composes it), also
    # where the search window ends right after it
    assert pieces.cut_near("x" * (CUT_SEARCH_CHARS - 2) + " a\u0301", 0) is None
    assert pieces.cut_near("x" * (CUT_SEARCH_CHARS - 2) + " ab", 0) == CUT_SEARCH_CHARS - 2
    words = Cutter("words")
    assert words.cut_near("\u2581\u2581a\u2581b", 1) == 3
