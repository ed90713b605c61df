"""Token constraints on the real vocabularies: differential test against outlines-core's
``Index`` and property tests (random walks validate, schema instances walk the index).

outlines-core is a test dependency only. Both compilers get the same regex and the same
vocabulary (our exact token bytes, end id = EOS); at every state reachable by tokens the
allowed sets must be identical, and transitions must lead to paired states again.

One outlines-core quirk: its DFA uses leftmost-first match semantics, so for a regex whose
match can be a proper prefix of a longer match (``[^\\n]{0,5}x`` after ``x``) it drops
continuations that ``re.fullmatch`` accepts, unless the regex ends in ``$``. Its regex gets
``(?:...)$`` around it (same language; our parser drops a trailing ``$`` too).

Default run: the light cases on all three vocabularies (~20 s). CI (CI=true) adds the heavy
cases on GPT-2 except the three largest (~30 s more; measured on the 2-core box). ``-m slow``
or TEXTPROC_FULL_CONSTRAINTS=1: every case on every vocabulary (outlines-core alone takes
minutes on Qwen3 for counted string lengths).
"""

from __future__ import annotations

import json
import os
import random
import re
from itertools import repeat
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.models import model_dir
from tests.helpers.schemas import SCHEMAS, instances
from textproc import TokenIndex, TokenVocabulary, Tokenizer, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex, tool_call_pattern

# The service's compile budget is what a request may cost; these tests check what is compiled,
# not how fast, so a loaded test machine must not turn a slow compile into a failure.
TEST_BUDGET_S = 600.0

oc = pytest.importorskip("outlines_core")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMAS["weather"]}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        "required": ["query"]}}},
    {"type": "function", "function": {"name": "noop"}},
]
REGEXES = {
    "words": r"[a-z]+ [0-9]{2}",
    "alternation": r"(?:foo|bar|é+)\.",
    "counted_any": r"[^\n]{0,5}x",
    # [0-9], not \d: both follow their Unicode tables for \d, and Rust's are newer than Python 3.11's
    "phone": r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}",
    "ip": r"(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})",
    "cjk": r"[\u4e00-\u9fff]{1,3}|[ぁ-ん]+",
    "emoji": "(?:😀|👍🏽|\U0001F600-\U0001F64F)+",
    "yes_no": r"(?:yes|no|maybe)",
    "sentence": r"[A-Z][a-z]{0,8}(?: [a-z]{1,8}){0,3}\.",
    "json_string": r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"',
    "hex": r"0x[0-9a-fA-F]+",
    "newlines": r"(?:line\n){1,3}end",
    "date_time": json_schema_to_regex({"type": "string", "format": "date-time"}),
    "email": json_schema_to_regex({"type": "string", "format": "email"}),
}
CASES: dict[str, str] = {f"schema:{name}": json_schema_to_regex(schema) for name, schema in SCHEMAS.items()}
CASES.update({f"regex:{name}": rx for name, rx in REGEXES.items()})
CASES["tools:named"] = tool_call_pattern(TOOLS, "search")
CASES["tools:required"] = tool_call_pattern(TOOLS)
# outlines-core takes minutes on counted string lengths (weather: maxLength 12) on 150k-token
# vocabularies; those run in the full matrix only
HEAVY = {"schema:weather", "schema:nested", "tools:required", "schema:patterns", "regex:sentence", "schema:any_of",
         "schema:enum_values", "schema:free_array", "schema:free_object", "schema:any_object", "schema:bool_schemas",
         "schema:tree"}
# 6-18 s each on the 150k-token vocabularies (outlines-core's compile, mostly): GPT-2 only by default
HEAVY_ON_BIG_VOCABS = {"schema:all_optional", "schema:one_of_tagged", "schema:int_range", "schema:formats",
                       "schema:no_params"}
VOCABS = ["qwen3", "gpt2", "mistral"]


CI_SKIPPED = {"schema:free_array", "schema:free_object", "schema:bool_schemas"}


def _heavy_runs(config: pytest.Config, vocab: str, case: str) -> bool:
    markexpr = config.option.markexpr or ""
    if ("slow" in markexpr and "not slow" not in markexpr) or os.environ.get("TEXTPROC_FULL_CONSTRAINTS") == "1":
        return True
    return os.environ.get("CI") == "true" and vocab == "gpt2" and case not in CI_SKIPPED


_VOCABS: dict[str, tuple[TokenVocabulary, Any]] = {}


def vocabulary(name: str) -> tuple[TokenVocabulary, Any]:
    """Our vocabulary and outlines-core's, built from the same bytes (cached per module)."""
    if name not in _VOCABS:
        v = TokenVocabulary.from_dir(model_dir(name))
        by_bytes: dict[bytes, list[int]] = {}
        for i in range(v.size):
            data = v.token_bytes(i)
            if data:
                by_bytes.setdefault(data, []).append(i)
        _VOCABS[name] = (v, oc.Vocabulary(v.end_ids[0], by_bytes))
    return _VOCABS[name]


def compare(index: TokenIndex, theirs: Any, vocab: TokenVocabulary) -> int:
    """Walk both indexes in lockstep; return the number of state pairs checked.

    A state of ours meets several of theirs: its allowed ids and its next state per id are
    looked up once (every pair checks that those ids are exactly theirs, minus the end id)."""
    eos = vocab.end_ids[0]
    ends = set(vocab.end_ids)
    transitions = theirs.get_transitions()
    finals = theirs.get_final_states()
    start = (index.initial_state, theirs.get_initial_state())
    seen = {start}
    todo = [start]
    allowed_of: dict[int, set[int]] = {}
    next_of: dict[int, dict[int, int]] = {}  # ours -> {allowed id but eos: our next state}
    while todo:
        ours, other = todo.pop()
        allowed = allowed_of.get(ours)
        if allowed is None:
            allowed = allowed_of[ours] = set(index.allowed_ids(ours))
        moves = transitions.get(other, {})
        assert index.is_accepting(ours) == (other in finals)
        assert ends <= allowed if index.is_accepting(ours) else not (ends & allowed)
        ids = moves.keys() - {eos}
        extra, missing = allowed - ends - ids, ids - allowed
        assert not extra and not missing, (
            f"state {ours}: we allow {sorted(vocab.token_bytes(t) for t in extra)[:5]} more and "
            f"{sorted(vocab.token_bytes(t) for t in missing)[:5]} fewer")
        nexts = next_of.get(ours)
        if nexts is None:
            moving = sorted(allowed - {eos})
            nexts = next_of[ours] = dict(zip(moving, map(index.next_state, repeat(ours), moving)))
        # ids lie within our allowed ids (asserted above): every one has its next state
        pairs = set(zip(map(nexts.__getitem__, ids), map(moves.__getitem__, ids)))
        pairs -= seen
        seen |= pairs
        todo.extend(pairs)
    return len(seen)


def _params() -> list[Any]:
    out = []
    for vocab in VOCABS:
        for case in CASES:
            heavy = case in HEAVY or (vocab != "gpt2" and (case.startswith("tools")
                                                            or case in HEAVY_ON_BIG_VOCABS))
            out.append(pytest.param(vocab, case, marks=[pytest.mark.slow] if heavy else [], id=f"{vocab}-{case}"))
    return out


@pytest.mark.parametrize(("vocab_name", "case"), _params())
def test_same_allowed_sets_as_outlines_core(vocab_name: str, case: str, request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("slow") and not _heavy_runs(request.config, vocab_name, case):
        pytest.skip("full constraint matrix: run with -m slow (or TEXTPROC_FULL_CONSTRAINTS=1); CI=true adds the GPT-2 cases only")
    vocab, theirs_vocab = vocabulary(vocab_name)
    regex = CASES[case]
    index = compile_constraint(vocab, regex=regex, cache=None, budget=Budget(max_seconds=TEST_BUDGET_S))
    theirs = oc.Index(f"(?:{regex})$", theirs_vocab)
    assert compare(index, theirs, vocab) >= index.n_states


def test_matrix_size() -> None:
    assert len(CASES) >= 30 and len(VOCABS) == 3


# -- properties on the real Qwen3 vocabulary --------------------------------------------------

WALK_SCHEMAS = ["weather", "nested", "one_of_tagged", "tree", "formats", "enum_values", "int_range"]


@pytest.fixture(scope="module")
def qwen() -> tuple[TokenVocabulary, Tokenizer]:
    return vocabulary("qwen3")[0], Tokenizer.from_dir(model_dir("qwen3"))


@pytest.mark.parametrize("name", WALK_SCHEMAS)
def test_random_walks_validate(name: str, qwen: tuple[TokenVocabulary, Tokenizer]) -> None:
    vocab, _ = qwen
    schema = SCHEMAS[name]
    regex = re.compile(json_schema_to_regex(schema))
    index = compile_constraint(vocab, json_schema=schema, budget=Budget(max_seconds=TEST_BUDGET_S))
    rng = random.Random(name)
    ends = set(vocab.end_ids)
    allowed_at: dict[int, list[int]] = {}  # allowed_ids costs O(allowed): once per state
    for _ in range(20):
        state, data = index.initial_state, b""
        for _ in range(400):
            allowed = allowed_at.get(state) or allowed_at.setdefault(state, index.allowed_ids(state))
            assert allowed
            # prefer ending when possible so walks finish inside the step cap
            token_id = next(iter(ends)) if index.is_accepting(state) and rng.random() < 0.5 else rng.choice(allowed)
            if token_id in ends:
                break
            data += vocab.token_bytes(token_id)
            state = index.next_state(state, token_id)
        else:
            continue
        text = data.decode("utf-8")
        assert regex.fullmatch(text), text
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("name", ["weather", "nested", "one_of_tagged", "formats", "int_range"])
@settings(max_examples=min(settings.default.max_examples, 25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_instance_tokenizations_walk_the_index(name: str, qwen: tuple[TokenVocabulary, Tokenizer], data: st.DataObject) -> None:
    vocab, tok = qwen
    schema = SCHEMAS[name]
    value = data.draw(instances(schema, schema))
    text = json.dumps(value, ensure_ascii=False)
    index = compile_constraint(vocab, json_schema=schema, budget=Budget(max_seconds=TEST_BUDGET_S))
    state = index.initial_state
    for token_id in tok.encode(text):
        state = index.next_state(state, token_id)
        assert state >= 0, (text, token_id)
    assert index.is_accepting(state)
