"""The constraint compiler on small vocabularies: regex syntax, byte DFA, token index, cache.

Real vocabularies and the differential test against outlines-core are in
tests/parity/test_constraints.py.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc import TokenIndex, TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, IndexCache
from textproc.core.constraints.automaton.dfa import build_dfa, utf8_sequences
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput

# a toy vocabulary: single bytes for ASCII letters/digits/punctuation, a few merges, whole and
# partial UTF-8 characters, a special token and an end id
PIECES = [chr(c).encode() for c in range(0x20, 0x7F)] + [
    b"ab", b"abc", b"\"a", b"a\"", b"12", b"\n", b"\t", "é".encode(), "中".encode(), "中"[0].encode()[:1],
    "中".encode()[1:], b"\xe4", b"\xb8", b"\xad", b"true", b"false", b"null", b", ", b": ", b"{\"", b"\"}",
    b"foo", b"bar", b"fo", b"hello", b"a b c", "世界".encode(), "é中".encode(), b"\\n", b"x\"", b"@ex",
    b"0123456789", "\U0001F600".encode(),
]
END = len(PIECES)
SPECIAL = END + 1
VOCAB = TokenVocabulary([*PIECES, b"", b"<|x|>", b"ab"], end_ids=[END], special_ids=[SPECIAL])
REGEXES = [
    r"ab|abc", r"(?:foo|bar)+", r"[a-c]{2,4}x?", r"\d+(?:\.\d{1,2})?", r"[^a]{0,3}é", r"中+|é",
    r'"(?:[^"\\]|\\.)*"', r"(true|false|null)", r"x*", r"[A-Z][a-z]*( [A-Z][a-z]*){0,2}",
    r"\{\"a\": [0-9]+\}", r"[\u4e00-\u9fff]{1,2}", r"(?:ab){2}|a(?:ba)*",
    # counted repetitions (chain states), loop entries, escapes inside counted strings
    r'"[^"]{0,6}"', r'"(?:[^"\\]|\\.){0,5}"', r"[a-z][a-z0-9 ]{0,7}", r"x[a-z ]+y", r"[a-zA-Z0-9._%+-]+@[a-z]+",
    r"[^\n]{2,4}", r".{0,3}x[^x]{1,3}",
]
POOL = "abcx.\"\\é中1 {}:\n"


def _walk_strings(index: TokenIndex, rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        state, data = index.initial_state, b""
        for _ in range(40):
            allowed = index.allowed_ids(state)
            assert allowed, "a state with nothing allowed"
            token_id = rng.choice(allowed)
            if token_id == END:
                break
            data += VOCAB.token_bytes(token_id)
            state = index.next_state(state, token_id)
            assert state >= 0
        else:
            continue
        out.append(data)
    return out


@pytest.mark.parametrize("pattern", REGEXES)
def test_dfa_agrees_with_re_fullmatch(pattern: str) -> None:
    dfa = build_dfa(parse_regex(pattern), Budget())
    rng = random.Random(pattern)
    compiled = re.compile(pattern)
    for _ in range(400):
        text = "".join(rng.choice(POOL) for _ in range(rng.randint(0, 6)))
        state = dfa.walk(dfa.start, text.encode())
        assert (state >= 0 and dfa.accepting[state]) == bool(compiled.fullmatch(text)), text


@pytest.mark.parametrize("pattern", REGEXES)
def test_random_walks_give_matching_bytes(pattern: str) -> None:
    index = compile_constraint(VOCAB, regex=pattern, cache=None)
    for data in _walk_strings(index, random.Random(pattern), 60):
        assert re.compile(pattern).fullmatch(data.decode("utf-8")), data


@pytest.mark.parametrize("pattern", REGEXES)
def test_allowed_means_bytes_stay_alive(pattern: str) -> None:
    """The definition: allowed iff walking the token's bytes never reaches the dead state."""
    dfa = build_dfa(parse_regex(pattern), Budget())
    index = compile_constraint(VOCAB, regex=pattern, cache=None)
    seen = {index.initial_state: dfa.start}
    todo = [index.initial_state]
    while todo:
        state = todo.pop()
        q = seen[state]
        allowed = set(index.allowed_ids(state))
        for token_id in range(VOCAB.size):
            data = VOCAB.token_bytes(token_id)
            if token_id == END:
                assert (token_id in allowed) == dfa.accepting[q]
                continue
            nxt = dfa.walk(q, data) if data else -1
            assert (token_id in allowed) == (nxt >= 0), (pattern, data)
            if nxt >= 0 and index.next_state(state, token_id) not in seen:
                seen[index.next_state(state, token_id)] = nxt
                todo.append(index.next_state(state, token_id))


def test_index_api_and_mask_layout() -> None:
    index = compile_constraint(VOCAB, regex="ab", cache=None)
    s0 = index.initial_state
    a, ab = PIECES.index(b"a"), PIECES.index(b"ab")
    duplicate_ab = SPECIAL + 1
    assert index.allowed_ids(s0) == sorted([a, ab, duplicate_ab])
    mask = index.allowed_mask(s0)
    assert len(mask) == (VOCAB.size + 31) // 32 * 4
    words = [int.from_bytes(mask[i : i + 4], "little", signed=True) for i in range(0, len(mask), 4)]
    assert [i for i in range(VOCAB.size) if words[i // 32] >> (i % 32) & 1] == index.allowed_ids(s0)
    end = index.next_state(s0, ab)
    assert index.is_accepting(end) and index.allowed_ids(end) == [END]
    assert index.next_state(end, END) == end
    assert index.next_state(s0, PIECES.index(b"b")) == -1
    assert index.next_state(s0, SPECIAL) == -1 and index.next_state(s0, 10**6) == -1
    assert index.n_states == 3 and index.nbytes > 0
    copy = TokenIndex.unpack(key=index.key, **index.pack())  # type: ignore[arg-type]
    for s in range(index.n_states):
        assert copy.allowed_mask(s) == index.allowed_mask(s)
        assert [copy.next_state(s, t) for t in range(VOCAB.size)] == [index.next_state(s, t) for t in range(VOCAB.size)]
        assert copy.transitions(s) == index.transitions(s)
    assert copy.pack() == index.pack() and copy.nbytes == index.nbytes  # packed again as it came
    fresh = TokenIndex.unpack(key=index.key, **index.pack())  # type: ignore[arg-type]
    assert fresh.pack() == index.pack() and fresh.nbytes == index.nbytes  # with no state walked


def test_choice_json_schema_and_tools() -> None:
    index = compile_constraint(VOCAB, choice=["foo", "bar", "a.b"], cache=None)
    assert {VOCAB.token_bytes(t) for t in index.allowed_ids(0)} >= {b"foo", b"fo", b"bar", b"a"}
    index = compile_constraint(VOCAB, json_schema={"type": "boolean"}, cache=None)
    assert {VOCAB.token_bytes(t) for t in index.allowed_ids(0)} == {b"t", b"f", b"true", b"false"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    index = compile_constraint(VOCAB, tools=tools, tool_name="f", cache=None)
    assert [VOCAB.token_bytes(t) for t in index.allowed_ids(0)] == [b"<"]


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("a(?=b)", r"a lookahead '\(\?=b' at position 1"),
        ("(?<!x)a", "a negative lookbehind .* at position 0"),
        (r"(a)\1", r"a backreference \\1 at position 3"),
        ("(?i)abc", "inline flags .* at position 0"),
        ("a*+", "a possessive quantifier at position 2"),
        (r"a\bb", r"the assertion \\b at position 1"),
        ("a^b", "the anchor '\\^' inside the pattern at position 1"),
        ("a**", "a quantifier after a quantifier at position 2"),
        ("(ab", "an unclosed group at position 0"),
        ("[ab", "an unclosed '\\[' at position 0"),
    ],
)
def test_unsupported_regex_names_construct_and_position(pattern: str, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        compile_constraint(VOCAB, regex=pattern, cache=None)


def test_vocabulary_cannot_express() -> None:
    with pytest.raises(InvalidInput, match="this vocabulary cannot express regex 'a☃'"):
        compile_constraint(VOCAB, regex="a☃", cache=None)
    with pytest.raises(InvalidInput, match="matches nothing"):
        compile_constraint(VOCAB, regex="[^\\x00-\\U0010ffff]", cache=None)


def test_budget_and_failure_cache() -> None:
    cache = IndexCache()
    with pytest.raises(InvalidInput, match="over 50 automaton states"):
        compile_constraint(VOCAB, regex="[a-z]{0,400}", budget=Budget(max_states=50), cache=cache)
    with pytest.raises(InvalidInput, match="over 50 automaton states"):  # remembered
        compile_constraint(VOCAB, regex="[a-z]{0,400}", budget=Budget(max_states=50), cache=cache)
    with pytest.raises(InvalidInput, match="took over 0 s"):
        compile_constraint(VOCAB, regex="[a-z]{0,3000}", budget=Budget(max_seconds=0.0), cache=None)


def test_cache_is_content_addressed_and_bounded() -> None:
    cache = IndexCache(max_bytes=10_000)
    one = compile_constraint(VOCAB, regex="a|b", cache=cache)
    assert compile_constraint(VOCAB, regex="a|b", cache=cache) is one and cache.hits == 1
    assert compile_constraint(VOCAB, choice=["a", "b"], cache=cache) is one  # the same regex: one index
    other = TokenVocabulary([*PIECES, b"", b"<|x|>"], end_ids=[END], special_ids=[SPECIAL])
    assert compile_constraint(other, regex="a|b", cache=cache).key != one.key
    for i in range(40):
        compile_constraint(VOCAB, regex=f"a{{{i}}}", cache=cache)
    assert cache.nbytes <= 10_000


def test_exactly_one_constraint() -> None:
    with pytest.raises(InvalidInput, match="exactly one of regex, json_schema, choice, tools"):
        compile_constraint(VOCAB, regex="a", choice=["a"])
    with pytest.raises(InvalidInput, match="keyword 'not' at \\$.properties.x"):
        compile_constraint(VOCAB, json_schema={"type": "object", "properties": {"x": {"not": {}}}})


def test_tokens_continuing() -> None:
    a, ab, abc = (PIECES.index(p) for p in (b"a", b"ab", b"abc"))
    assert VOCAB.tokens_continuing("abcd") == sorted([a, ab, abc, SPECIAL + 1])
    assert VOCAB.tokens_continuing("中", written=b"\xe4") == [PIECES.index(b"\xb8\xad"), PIECES.index(b"\xb8")]
    assert VOCAB.tokens_continuing("ab", written="ab") == []
    with pytest.raises(InvalidInput, match="not a prefix"):
        VOCAB.tokens_continuing("ab", written="b")


def test_from_vocab_json(tmp_path: Path) -> None:
    forward = {"a": 0, "Ġb": 1, "Ċ": 2, "Ã©": 3, "ab": 4, "ab2": 4}
    (tmp_path / "vocab.json").write_text(json.dumps(forward))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>",
        "added_tokens_decoder": {
            "6": {"content": "<|im_end|>", "special": True},
            "7": {"content": "<tool_call>", "special": False},
            "8": {"content": "<|endoftext|>", "special": True},
        },
    }))
    v = TokenVocabulary.from_dir(tmp_path)
    assert [v.token_bytes(i) for i in range(9)] == [b"a", b" b", b"\n", "é".encode(), b"ab2", b"", b"", b"<tool_call>", b""]
    # the end id is the EOS alone: <|endoftext|> ends nothing unless a generation config says so
    assert v.end_ids == (6,) and v.special_ids == {6, 8}


@given(st.text(alphabet=POOL, max_size=8))
def test_utf8_sequences_cover_exactly(text: str) -> None:
    for ch in text:
        code = ord(ch)
        data = ch.encode()
        seqs = utf8_sequences(0x80, 0x10FFFF) + utf8_sequences(0, 0x7F)
        assert any(len(s) == len(data) and all(lo <= b <= hi for b, (lo, hi) in zip(data, s)) for s in seqs), code


@pytest.mark.parametrize("pattern", REGEXES)
def test_completion_tokens_reach_an_accepting_state(pattern: str) -> None:
    index = compile_constraint(VOCAB, regex=pattern, cache=None)
    for state in range(index.n_states):
        s, steps = state, 0
        while not index.is_accepting(s):
            token_id = index.completion_token(s)
            assert token_id in index.allowed_ids(s), (pattern, state, s)
            s = index.next_state(s, token_id)
            steps += 1
        assert steps == index.completion_length(state), (pattern, state)
