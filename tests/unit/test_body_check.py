"""``textproc.http.body_check``: the raw-bytes limits of every JSON body (depth, integers, Unicode),
checked against the same rules computed on the decoded Python value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textproc.http.api_types import ApiError
from textproc.http.body_check import INT_RANGE, check_body
from textproc.protocol import MAX_JSON_DEPTH


def _deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _error(body: bytes, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        check_body(body, **kwargs)
    assert info.value.status == 400
    return info.value


def test_depth_limit_is_exact_and_names_the_path() -> None:
    check_body(json.dumps(_deep(MAX_JSON_DEPTH)).encode())
    err = _error(json.dumps({"a": [0, _deep(MAX_JSON_DEPTH)]}).encode())
    assert err.param is not None and err.param.startswith("a[1][0].k[0].k[0]")
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in err.message
    assert "byte" in err.message
    # brackets and digits inside strings are text, not structure
    check_body(json.dumps({"s": "[" * 500 + "9" * 40, "t": '\\"{{{{'}).encode(), max_depth=2)


def test_integers_must_fit_64_bits() -> None:
    low, high = INT_RANGE
    check_body(json.dumps({"a": [low, high, 1.5e300, 1e-400, 0.1234567890123456789012]}).encode())
    for value in (high + 1, low - 1, 10**40):
        err = _error(json.dumps({"x": {"y": [1, value]}}).encode())
        assert err.param == "x.y[1]" and str(INT_RANGE[1]) in err.message


def test_lone_surrogates_are_refused_pairs_are_not() -> None:
    check_body(b'{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}')  # a pair; an escaped backslash
    for text in (b'"\\ud800"', b'"\\udc00x"', b'"\\ud800\\ud800"', b'"x\\uDBFF"'):
        err = _error(b'{"m": [{"c": ' + text + b"}]}")
        assert err.param == "m[0].c" and "lone UTF-16 surrogate" in err.message


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _ints(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def _lone(value: Any) -> bool:
    texts = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            texts += list(v)
            stack += list(v.values())
        elif isinstance(v, list):
            stack += v
        elif isinstance(v, str):
            texts.append(v)
    return any("\ud800" <= c <= "\udfff" for t in texts for c in t)


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(codec=None), max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, max_depth=st.integers(1, 6), ensure_ascii=st.booleans())
def test_matches_the_rules_on_the_decoded_value(value: Any, max_depth: int,
                                                ensure_ascii: bool) -> None:
    try:
        body = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    except UnicodeEncodeError:
        return
    if not ensure_ascii and _lone(value):
        return  # raw surrogate bytes: not UTF-8, the decoder refuses them
    bad = _depth(value) > max_depth or any(not INT_RANGE[0] <= i <= INT_RANGE[1]
                                           for i in _ints(value)) or _lone(value)
    try:
        check_body(body, max_depth=max_depth)
    except ApiError:
        assert bad, body
    else:
        assert not bad, body


_ESCAPY = st.lists(st.sampled_from(["\\", "\\\\", "u", "ud83d", "ude00", "udc00", "d8", "x",
                                     "\ud83d", "\ude00", "\udc00", "😀", '"']),
                    max_size=12).map("".join)


@given(_ESCAPY)
@settings(max_examples=400, deadline=None)
def test_only_a_real_escape_counts_as_a_surrogate(text: str) -> None:
    """The fast scan flags a body exactly when its decoded strings hold a lone surrogate: a
    backslash after an even run of backslashes starts an escape, text like ``\\\\ud83d`` (an
    escaped backslash, then "ud83d") is not one."""
    from textproc.http.body_check import _LONE_SURROGATE

    body = json.dumps({"content": text}).encode()
    decoded = json.loads(body)["content"]
    lone = any("\ud800" <= c <= "\udfff" for c in decoded)
    assert (_LONE_SURROGATE.search(body) is not None) == lone


def test_escaped_backslashes_never_take_the_slow_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversation whose text holds ``\\ud83d`` as characters is checked by the C-level
    scans alone (the token-by-token walk is only for a body that breaks a rule)."""
    import textproc.http.body_check as body_check

    def walk(body: bytes, max_depth: int) -> None:
        raise AssertionError("the slow walk ran")

    monkeypatch.setattr(body_check, "_locate", walk)
    messages = [{"role": "user", "content": "escape \\ud83d\\ude00 and \\\\ud800 " * 50}] * 100
    check_body(json.dumps({"messages": messages}).encode())
