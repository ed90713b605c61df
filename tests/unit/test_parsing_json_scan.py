"""JsonScanner agrees with json.loads (strict) on which object texts are valid, for any chunking."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from textproc.core.parsing.json_scan import DONE, ERROR, KEY, NEED_MORE, VALUE, VALUE_END, JsonScanner

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=10,
)
OBJECTS = st.dictionaries(st.text(max_size=3), VALUES, max_size=4)
DUMPS = st.sampled_from(
    [
        lambda v: json.dumps(v),
        lambda v: json.dumps(v, ensure_ascii=False),
        lambda v: json.dumps(v, indent=2),
        lambda v: json.dumps(v, separators=(",", ":")),
    ]
)
TOKENS = st.lists(
    st.sampled_from(
        ["{", "}", "[", "]", '"', '"a"', ":", ",", " ", "\n", "1", "0", "-", ".", "e", "E", "+", "2",
         "true", "tru", "null", "false", "\\", "\\u00e9", "\\uZ", "\\n", "\x01", "é"]
    ),
    max_size=25,
).map("".join)


def scan_all(text: str, size: int) -> tuple[bool, int, list[tuple[int, str]]]:
    """(accepted as one complete object with nothing after, error offset, top-level events)."""
    scanner = JsonScanner()
    events: list[tuple[int, str]] = []
    base = 0
    for start in range(0, len(text), size):
        chunk = text[start : start + size]
        pos = 0
        while True:
            event, pos = scanner.scan(chunk, pos)
            if event == NEED_MORE:
                break
            if event == ERROR:
                return False, base + pos, events
            if event in (KEY, VALUE_END):
                events.append((event, scanner.string if event == KEY else ""))
            if event == DONE:
                rest = chunk[pos:] + text[start + size :]
                return rest.strip(" \t\n\r") == "", base + pos, events
            assert event in (KEY, VALUE, VALUE_END)
        base += len(chunk)
    return False, len(text), events


def loads_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@given(OBJECTS, DUMPS, st.integers(1, 9))
def test_valid_objects_are_accepted_with_their_keys(obj: dict[str, object], dumps: object, size: int) -> None:
    text = dumps(obj)  # type: ignore[operator]
    ok, _, events = scan_all(text, size)
    assert ok
    assert [s for e, s in events if e == KEY] == list(obj)
    assert sum(1 for e, _ in events if e == VALUE_END) == len(obj)


@given(st.one_of(TOKENS, OBJECTS.map(json.dumps).flatmap(lambda t: st.integers(0, len(t)).map(lambda i: t[:i] + "x" + t[i:]))), st.integers(1, 9))
def test_acceptance_matches_json_loads(text: str, size: int) -> None:
    ok, bad, _ = scan_all(text, size)
    assert ok == loads_object(text), text
    if not ok and bad < len(text):
        # everything before the reported character is a valid prefix: it parses once completed
        # by something, and the character itself breaks it; check the weaker, decidable part
        assert not loads_object(text[: bad + 1])


def test_member_strings_are_decoded() -> None:
    scanner = JsonScanner()
    text = '{"n\\u00e9": "a\\"b\\u263a", "x": 1}'
    event, pos = scanner.scan(text, 0)
    assert (event, scanner.string) == (KEY, "né")
    event, pos = scanner.scan(text, pos)
    assert event == VALUE and text[pos] == '"'
    event, pos = scanner.scan(text, pos)
    assert (event, scanner.string) == (VALUE_END, 'a"b☺')
