"""StopChecker: streamed output equals the character-by-character one-shot truncation, any split."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.errors import InvalidInput
from textproc.core.stops import MAX_STOP_CHARS, MAX_STOPS, StopChecker

from tests.helpers.stop_reference import reference

ALPHABET = "ab\n</s>é😀 "


def partial_tail(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of a stop."""
    for k in range(min(len(text), max(map(len, stops), default=1) - 1), 0, -1):
        if any(s.startswith(text[-k:]) and len(s) > k for s in stops):
            return k
    return 0


texts = st.text(alphabet=ALPHABET, max_size=40)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=5), min_size=1, max_size=6)


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=len(text) + 1)))
    out, last = [], 0
    for c in cuts + [len(text)]:
        out.append(text[last:c])
        last = c
    return out


@given(data=st.data(), text=texts, stops=stop_lists, include_stop=st.booleans())
def test_streamed_equals_one_shot_and_holds_minimally(
    data: st.DataObject, text: str, stops: list[str], include_stop: bool
) -> None:
    deltas = data.draw(splits(text))
    expected, expected_stop = reference(text, stops, include_stop=include_stop)
    order = data.draw(st.permutations(stops))  # stop list order must not matter
    c = StopChecker(order, include_stop=include_stop)
    released, sofar = "", ""
    for delta in deltas:
        released += c.feed(delta)
        sofar += delta
        # never released anything the final output does not contain
        assert expected.startswith(released)
        if c.is_finished:
            break
        # released as soon as disproved: only a possible stop start is held
        k = 0 if include_stop else partial_tail(sofar, stops)
        assert released == sofar[: len(sofar) - k]
        assert c.held_text == sofar[len(sofar) - k :]
    released += c.finish()
    assert released == expected
    assert c.matched == expected_stop
    assert c.finish_reason == ("stop" if expected_stop else None)
    assert c.is_finished


@given(
    data=st.data(),
    tokens=st.lists(st.text(alphabet=ALPHABET, max_size=3), max_size=15),
    stops=stop_lists,
    min_tokens=st.integers(0, 6),
)
def test_min_tokens_one_token_per_feed(
    data: st.DataObject, tokens: list[str], stops: list[str], min_tokens: int
) -> None:
    """A stop counts only if its last character came from token min_tokens+1 or later."""
    text = "".join(tokens)
    eligible_from = len("".join(tokens[:min_tokens])) if min_tokens else 0
    expected, expected_stop = reference(text, stops, include_stop=False, eligible_from=eligible_from)
    c = StopChecker(stops, min_tokens=min_tokens)
    out = "".join(c.feed(t, n_tokens=1) for t in tokens) + c.finish()
    assert (out, c.matched) == (expected, expected_stop)


def test_examples() -> None:
    c = StopChecker(["abcd", "bc"])
    assert (c.feed("a"), c.feed("bcd"), c.matched) == ("", "a", "bc")  # "bc" completes first
    c = StopChecker(["ab", "b"])  # both complete at "b": the one starting first wins
    assert (c.feed("xa"), c.feed("b"), c.matched) == ("x", "", "ab")
    c = StopChecker(["</s>"], include_stop=True)
    assert (c.feed("Hi </"), c.feed("s> more"), c.feed("x"), c.finish()) == ("Hi </", "s>", "", "")
    c = StopChecker(["STOP"])
    assert (c.feed("ST"), c.feed("OR"), c.finish()) == ("", "STOR", "")
    c = StopChecker("\n\n")  # a bare string is one stop, as in OpenAI's API
    assert c.feed("a\n\nb") == "a" and c.matched == "\n\n"
    c = StopChecker(["x"], min_tokens=2)
    assert (c.feed("x", n_tokens=1), c.feed("x", n_tokens=1), c.feed("ax", n_tokens=1)) == ("x", "x", "a")
    assert c.feed("more") == "" and c.finish() == ""


def test_stop_token_reported_through_same_path() -> None:
    c = StopChecker(["END"])
    assert c.feed("text EN") == "text "
    assert c.stopped_by_token(2) == "EN"
    assert (c.is_finished, c.finish_reason, c.stop_reason, c.matched) == (True, "stop", 2, None)
    assert c.feed("more") == ""


def test_no_stops_passes_everything() -> None:
    c = StopChecker(())
    assert c.feed("abc") == "abc" and c.finish() == "" and c.finish_reason is None


@pytest.mark.parametrize(
    ("stops", "kwargs", "match"),
    [
        (["ok", ""], {}, r"empty stop string at stop\[1\]; allowed: 1\.\.1024 characters"),
        (["ok", 3], {}, r"stop string 3 at stop\[1\] is not a string"),
        (["x" * 2000], {}, r"stop string 'xxx.* at stop\[0\] has 2000 characters; allowed: at most 1024"),
        ([str(i) for i in range(5)], {"max_stops": 4}, r"5 distinct stop strings .*allowed: at most 4"),
        (5, {}, r"stop strings 5 are not a list"),
        (["a"], {"min_tokens": -1}, r"min_tokens -1 is invalid; allowed: an int >= 0"),
    ],
)
def test_invalid_input_names_value_and_limit(stops: object, kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        StopChecker(stops, **kwargs)  # type: ignore[arg-type]


def test_limits_are_generous() -> None:
    assert MAX_STOPS >= 1000 and MAX_STOP_CHARS >= 256


def test_many_stops_streamed() -> None:
    """Thousands of stops: same answer as the reference, and fast enough per delta."""
    import time

    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 12))) for _ in range(3000)]
    text = " ".join(rng.choice(words) + "q" for _ in range(400)) + " " + words[1234] + " tail"
    deltas = [text[i : i + 4] for i in range(0, len(text), 4)]
    c = StopChecker(words)
    t0 = time.perf_counter()
    out = "".join(c.feed(d) for d in deltas) + c.finish()
    per_delta = (time.perf_counter() - t0) / len(deltas)
    assert (out, c.matched) == reference(text, words, include_stop=False)
    assert per_delta < 200e-6, f"{per_delta * 1e6:.1f} us per delta"
