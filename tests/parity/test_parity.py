"""Exactness: textproc.Tokenizer gives the reference's ids and decoded text on every corpus string.

Over eight tokenizers (tests/parity/references.py): the real qwen3, mistral, gpt2, cl100k and
deepseek vocabularies and three trained here. The reference is HF ``tokenizers`` on the same
tokenizer.json; the real ones also have a second reference (tiktoken on NFC text for qwen3,
tiktoken for gpt2 and cl100k, sentencepiece for mistral on text without its control strings).

The default run checks every edge case plus a prefix of the mixed corpus (``FAST_BYTES``).
The full >= 4 MB corpus runs with ``pytest -m slow``, TEXTPROC_FULL_PARITY=1, or in CI
(CI=true): measured 2 CPU-minutes for all six tokenizers (5 min wall on a shared 2-core box).
A mismatch names the string's source label, the first differing token and character
position, and a shrunk substring that still reproduces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.testing.corpus import (
    EDGE_CASES,
    REFERENCE_REFUSES,
    fast_items,
    first_difference,
    mixed_corpus_items,
)
from tests.helpers.models import MODELS_DIR
from tests.helpers.references import (
    CASE_NAMES,
    REAL_CASES,
    TRAINED_CASES,
    Case,
    get_case,
    trained_json,
)

FAST_BYTES = 100_000
FULL_BYTES = 4_000_000
MAX_REPORTED = 8
BATCH = 256  # texts per batch call of the reference


def _full_requested(config: pytest.Config) -> bool:
    """-m slow, TEXTPROC_FULL_PARITY=1, or CI (CI=true): the full corpus takes ~2 CPU-minutes
    (5 min wall on a busy 2-core box), which fits CI's budget but not the local default run."""
    markexpr = config.option.markexpr or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        return True
    return os.environ.get("TEXTPROC_FULL_PARITY") == "1" or os.environ.get("CI") == "true"


def _ours_ids(case: Case, text: str) -> list[int] | str:
    try:
        return list(case.ours.encode(text))
    except Exception as exc:  # noqa: BLE001 - reported as a mismatch
        return f"raised {type(exc).__name__}: {exc}"


def _shrink(case: Case, text: str, char_pos: int) -> str:
    """A short substring around ``char_pos`` on which ours and the reference still differ."""

    def differs(s: str) -> bool:
        try:
            return _ours_ids(case, s) != case.hf.encode(s, add_special_tokens=False).ids
        except Exception:  # noqa: BLE001 - e.g. a cut through a surrogate pair cannot happen, but be safe
            return False

    best = text
    for k in (2, 4, 8, 16, 32, 64, 128, 512, 2048):
        window = text[max(0, char_pos - k) : char_pos + k]
        if differs(window):
            best = window
            break
    changed = True
    while changed and len(best) > 1:
        changed = False
        for cut in (best[1:], best[:-1]):
            if differs(cut):
                best, changed = cut, True
                break
    return best


def _check_ids(case: Case, label: str, text: str, ref: Any = None) -> str | None:
    """``ref``: the reference's encoding of ``text`` when the caller has it (a batch)."""
    if ref is None:
        ref = case.hf.encode(text, add_special_tokens=False)
    ours = _ours_ids(case, text)
    if ours == ref.ids:
        return None
    if isinstance(ours, str):
        return f"[{case.name}] {label}: {ours} (reference gives {len(ref.ids)} ids); text {text[:80]!r}"
    i = first_difference(ours, ref.ids)
    char_pos = ref.offsets[i][0] if i < len(ref.offsets) else len(text)
    repro = _shrink(case, text, char_pos)
    return (
        f"[{case.name}] {label}: ids differ at token {i} (char {char_pos} of {len(text)}): "
        f"ours {ours[i:i + 6]} vs reference {ref.ids[i:i + 6]} "
        f"(len {len(ours)} vs {len(ref.ids)}); near {text[max(0, char_pos - 20):char_pos + 30]!r}; "
        f"minimal repro {repro[:200]!r}"
    )


def _check_decode(case: Case, label: str, text: str, ids: list[int] | None = None,
                  wants: tuple[str, str] | None = None) -> str | None:
    """``ids``: the reference's ids of ``text``; ``wants``: its decode of them without and with
    skip_special_tokens (when the caller has them from a batch)."""
    if ids is None:
        ids = case.hf.encode(text, add_special_tokens=False).ids
    for skip in (False, True):
        want = case.hf.decode(ids, skip_special_tokens=skip) if wants is None else wants[skip]
        try:
            got = case.ours.decode(ids, skip_special_tokens=skip)
        except Exception as exc:  # noqa: BLE001 - reported as a mismatch
            return f"[{case.name}] {label}: decode(skip_special_tokens={skip}) raised {exc!r}"
        if got != want:
            j = first_difference(got, want)
            return (
                f"[{case.name}] {label}: decode(skip_special_tokens={skip}) differs at char {j}: "
                f"ours {got[max(0, j - 10):j + 20]!r} vs reference {want[max(0, j - 10):j + 20]!r}"
            )
    return None


def _check_second(case: Case, label: str, text: str) -> str | None:
    if case.second_encode is None or not case.second_applies(text):
        return None
    text = case.second_text(text)
    want = case.second_encode(text)
    ours = _ours_ids(case, text)
    if ours == want:
        return None
    i = first_difference(ours, want) if not isinstance(ours, str) else 0
    return (
        f"[{case.name}] {label}: ids differ from {case.second_name} at token {i}: "
        f"ours {ours[i:i + 6] if not isinstance(ours, str) else ours} vs {want[i:i + 6]}; "
        f"text {text[:80]!r}"
    )


def _run(case: Case, items: Sequence[tuple[str, str]], *, second: bool) -> None:
    """Every check on every item; the reference encodes and decodes a batch at a time (its
    batch calls: one encode per text, in its own threads)."""
    problems: list[str] = []
    for start in range(0, len(items), BATCH):
        batch = items[start:start + BATCH]
        refs = case.hf.encode_batch([text for _, text in batch], add_special_tokens=False)
        ids = [ref.ids for ref in refs]
        decoded = [case.hf.decode_batch(ids, skip_special_tokens=skip) for skip in (False, True)]
        for i, ((label, text), ref) in enumerate(zip(batch, refs)):
            found = [_check_ids(case, label, text, ref),
                     _check_decode(case, label, text, ids[i], (decoded[0][i], decoded[1][i])),
                     _check_second(case, label, text) if second else None]
            problems.extend(p for p in found if p is not None)
    n = len(items)
    if problems:
        problems.append(_saved_vocab_note(case))
        if case.name == "trained-unigram" and _unigram_tie_mismatches():
            pytest.xfail(f"{len(problems) - 1} mismatches while the known Unigram tie bug "
                         f"(test_unigram_equal_score_paths) reproduces; first: {problems[0]}")
        shown = "\n".join(problems[:MAX_REPORTED])
        more = f"\n... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
        pytest.fail(f"{len(problems)} mismatches on {n} strings:\n{shown}{more}", pytrace=False)


def _saved_vocab_note(case: Case) -> str:
    """Trained vocabularies vary between runs (tokenizers' trainers are not deterministic), so a
    mismatch saves the one that showed it, to reproduce with Tokenizer.from_file."""
    if case.name not in TRAINED_CASES:
        return ""
    text = trained_json(case.name)
    path = MODELS_DIR.parent / "parity-failures" / (
        f"{case.name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return f"(trained vocabulary saved to {path})"


def _fast(case_name: str) -> list[tuple[str, str]]:
    items = fast_items(FAST_BYTES, long_words=case_name in ("qwen3", "trained-qwen"))
    return items


# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_fast_subset(case_name: str) -> None:
    """Ids and decode equal to HF tokenizers on all edge cases + a prefix of the mixed corpus."""
    case = get_case(case_name)
    _run(case, _fast(case_name), second=False)


@pytest.mark.parametrize("case_name", [n for n in REAL_CASES if n != "deepseek"])
def test_fast_subset_second_reference(case_name: str) -> None:
    """Ids equal to tiktoken / sentencepiece on the fast subset."""
    case = get_case(case_name)
    problems = [p for label, text in _fast(case_name)
                if (p := _check_second(case, label, text)) is not None]
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:MAX_REPORTED])


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_add_special_tokens_and_batch(case_name: str) -> None:
    """add_special_tokens=True applies the post-processor like HF; encode_batch == encode."""
    case = get_case(case_name)
    texts = ["Hello world", "", " leading", EDGE_CASES["special_tokens_in_text"], "中文 text"]
    for text in texts:
        want = case.hf.encode(text, add_special_tokens=True).ids
        assert list(case.ours.encode(text, add_special_tokens=True)) == want, text
    batch = [text for _, text in fast_items(20_000)][:40]
    want_batch = [e.ids for e in case.hf.encode_batch(batch, add_special_tokens=False)]
    assert [list(ids) for ids in case.ours.encode_batch(batch)] == want_batch


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_strings_the_reference_refuses(case_name: str) -> None:
    """Lone surrogates: HF tokenizers raises; textproc must raise InvalidInput, or encode the
    text with each lone surrogate replaced by U+FFFD (tiktoken's rule) - nothing else."""
    from textproc.errors import InvalidInput

    case = get_case(case_name)
    for name in sorted(REFERENCE_REFUSES):
        text = EDGE_CASES[name]
        with pytest.raises(Exception):
            case.hf.encode(text)
        replaced = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        try:
            got = list(case.ours.encode(text))
        except InvalidInput:
            continue
        assert got == case.hf.encode(replaced, add_special_tokens=False).ids, name


def test_qwen3_tiktoken_loader_matches_tiktoken() -> None:
    """Tokenizer.from_tiktoken on the rank file equals tiktoken (on NFC text) and the dir."""
    case = get_case("qwen3")
    from textproc.core.tokenizer import Tokenizer

    from tests.helpers.models import model_dir

    specials = {t.content: i for i, t in case.hf.get_added_tokens_decoder().items()}
    from tests.helpers.references import QWEN_PATTERN

    tok = Tokenizer.from_tiktoken(model_dir("qwen3") / "qwen.tiktoken", QWEN_PATTERN, specials,
                                  nfc=True)
    assert case.second_encode is not None
    for label, text in fast_items(40_000):
        text = unicodedata.normalize("NFC", text)
        assert list(tok.encode(text)) == case.second_encode(text), label
        assert list(tok.encode(text)) == list(case.ours.encode(text)), label


_FRAGMENTS = sorted({piece for text in EDGE_CASES.values() for piece in text.split(" ")
                     if piece and len(piece) < 40 and not any(0xD800 <= ord(c) < 0xE000 for c in piece)})
_TEXTS = st.lists(
    st.one_of(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
        st.sampled_from(_FRAGMENTS),
        st.sampled_from([" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "\u0301", "\u0338", "1", "é"]),
    ),
    max_size=12,
).map("".join)


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_random_text(case_name: str) -> None:
    """Random mixes of corpus pieces, whitespace, marks and arbitrary characters."""
    case = get_case(case_name)

    tie_bug = case_name == "trained-unigram" and bool(_unigram_tie_mismatches())
    known: list[str] = []

    @given(_TEXTS)
    def check(text: str) -> None:
        problem = _check_ids(case, "hypothesis", text) or _check_decode(case, "hypothesis", text)
        if problem is not None and tie_bug:
            known.append(problem)
            return
        assert problem is None, f"{problem} {_saved_vocab_note(case)}"

    check()
    if known:
        pytest.xfail(f"{len(known)} mismatches while the known Unigram tie bug reproduces; "
                     f"first: {known[0]} {_saved_vocab_note(case)}")


_TIE_PIECES = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["▁", -1.204627448589612],
               ["▁=", -5.715260860112222], ["=", -6.433993973982883],
               ["▁==", -7.521694764057664], ["=============", -10.000530232488181]]
_TIE_LENGTHS = (17, 23, 25, 30, 31, 36, 1, 13, 14, 26)


def _unigram_tie_mismatches() -> list[int]:
    """Run lengths n where ``"=" * n`` gets other ids from textproc than from tokenizers on a
    Unigram vocabulary whose segmentations tie (found by the trained-unigram case)."""
    import tokenizers

    from textproc.core.tokenizer import Tokenizer

    obj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                          "split": True},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                    "split": True},
        "model": {"type": "Unigram", "unk_id": 2, "vocab": _TIE_PIECES, "byte_fallback": False},
    }
    hf = tokenizers.Tokenizer.from_str(json.dumps(obj))
    ours = Tokenizer.from_json(obj, source="unigram-ties")
    return [n for n in _TIE_LENGTHS if ours.encode("=" * n) != hf.encode("=" * n).ids]


# Known textproc bug (reported to the TOKENIZER owner): remove this marker once it is fixed;
# until then the trained-unigram corpus cases attribute their mismatches to it (see _run).
def test_unigram_equal_score_paths() -> None:
    """Pinned repro: segmentations of '=' runs with equal total scores. tokenizers keeps the
    first best candidate per end position while scanning start positions left to right."""
    assert _unigram_tie_mismatches() == []


# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_full_corpus(case_name: str, request: pytest.FixtureRequest) -> None:
    """Ids and decode on the whole >= 4 MB corpus (plus the second reference where it exists)."""
    if not _full_requested(request.config):
        pytest.skip("full 4 MB parity corpus: run with -m slow (or TEXTPROC_FULL_PARITY=1; CI runs it)")
    case = get_case(case_name)
    _run(case, mixed_corpus_items(FULL_BYTES), second=case_name in REAL_CASES)


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_specials_as_text_matches_encode_special_tokens(case_name: str) -> None:
    """``encode_specials_as_text`` == HF with ``encode_special_tokens = True`` (special tokens'
    text as ordinary text, other added tokens still matched), on random mixes of added tokens."""
    import random

    import tokenizers

    case = get_case(case_name)
    hf = tokenizers.Tokenizer.from_str(case.hf.to_str())  # a copy: the flag is per object
    hf.encode_special_tokens = True
    pieces = sorted(case.ours.added_tokens) + ["hi", " ", "\n", "x y", " <", "|>", "é", "  "]
    rng = random.Random(7)
    for _ in range(200):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert case.ours.encode_specials_as_text(text) == \
            hf.encode(text, add_special_tokens=False).ids, text
