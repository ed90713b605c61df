"""The compile budget holds in every phase: a schema that would expand into a giant regex is
refused while it expands, a giant regex is refused before it is parsed, and a deadline passed
in any phase (indexing, packing the masks, shortest completions, ...) ends the compile with an
``InvalidInput`` that names the budget, the constraint and the phase."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.budget import MAX_REGEX_CHARS
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput

VOCAB = TokenVocabulary([bytes([b]) for b in range(32, 127)] + [b"ab", b"\"", b"{\"", b""], end_ids=[98])
# 200 optional free-form properties: 2 KB of schema, ~100 MB of plain regex (each "any JSON
# value" is ~5 KB of it); written with calls of its repeated parts it is ~114 K characters,
# and its automaton needs over 20,000 states
FREE_FORM = {"type": "object", "properties": {f"p{i}": {} for i in range(200)}}
# 2,100 distinct 500-character constants: over 1 MiB of regex however it is written
DISTINCT = {"type": "object", "properties": {f"p{i}": {"const": f"{i:04d}" + "x" * 500} for i in range(2100)}}


def test_giant_schema_is_refused_while_it_expands() -> None:
    t0 = time.process_time()  # CPU: a loaded box stretches the wall time, not the work
    with pytest.raises(InvalidInput, match=r"the JSON schema at \$[.a-z0-9]* expands to a regex of over .* character budget"):
        json_schema_to_regex(DISTINCT)
    assert time.process_time() - t0 < 2.0  # expanding it all takes seconds and 100 MB
    with pytest.raises(InvalidInput, match="over the 1,000 character budget"):
        compile_constraint(VOCAB, json_schema=FREE_FORM, budget=Budget(max_regex_chars=1000), cache=None)
    with pytest.raises(InvalidInput, match="over 2000 automaton states"):
        compile_constraint(VOCAB, json_schema=FREE_FORM, budget=Budget(max_states=2000), cache=None)


def test_nested_arrays_call_their_items() -> None:
    """Each level spells its items twice: 2**40 characters of plain regex, a few KB with calls
    (``(?&name)``), and the automaton builds each call once per continuation."""
    schema: dict = {"type": "integer"}
    for _ in range(40):
        schema = {"type": "array", "items": schema, "minItems": 1}
    regex = json_schema_to_regex(schema)
    assert regex.startswith("(?(DEFINE)") and len(regex) < 10_000
    dfa = build_dfa(parse_regex(regex), Budget())
    assert dfa.n_states < 200
    text = ("[" * 40 + "1, 2" + "]" * 40).encode()
    assert dfa.accepting[dfa.walk(dfa.start, text)] and dfa.walk(dfa.start, text[1:]) != 0


def test_giant_regex_is_refused_before_parsing() -> None:
    pattern = "(?:ab|c)" * (MAX_REGEX_CHARS // 8 + 1)
    t0 = time.monotonic()
    with pytest.raises(InvalidInput, match="regex .* is 1,048,584 characters, over the 1,048,576 character budget"):
        parse_regex(pattern)
    with pytest.raises(InvalidInput, match="regex .* is a regex of 1,048,584 characters, over"):
        compile_constraint(VOCAB, regex=pattern, cache=None)
    assert time.monotonic() - t0 < 0.5


@dataclass
class _ExpiresIn(Budget):
    """A budget whose deadline passes the moment the compile reaches ``phase``."""

    phase: str = ""

    def check_time(self, phase: str) -> None:
        if phase.startswith(self.phase):
            self.max_seconds = -1.0
        super().check_time(phase)


@pytest.mark.parametrize("phase", ["determinising", "minimising", "indexing the vocabulary",
                                   "packing the masks", "renumbering the index states",
                                   "finding the shortest completions"])
def test_every_phase_checks_the_deadline(phase: str) -> None:
    budget = _ExpiresIn(phase=phase)
    with pytest.raises(InvalidInput, match=rf"compiling regex '\[a-z\]\{{0,150\}}' took over -1 s, the compile time "
                                           rf"budget \(stopped while {phase}"):
        compile_constraint(VOCAB, regex="[a-z]{0,150}", budget=budget, cache=None)


def test_parsing_checks_the_deadline() -> None:
    budget = Budget(max_seconds=-1.0)
    with pytest.raises(InvalidInput, match="stopped while parsing the regex"):
        parse_regex("a" * 10_000, budget)


def test_index_size_budget_counts_exception_entries() -> None:
    # counted repetitions: every token length goes to another state, so most tokens are
    # exception entries (8 bytes each), far more than the masks
    letters = [bytes([c]) for c in range(97, 123)]
    vocab = TokenVocabulary([*letters, *(a + b for a in letters for b in letters), b""], end_ids=[702])
    index = compile_constraint(vocab, regex="[a-z]{0,20}", cache=None)
    assert index.nbytes - 88 * len(set(map(index.allowed_mask, range(index.n_states)))) > 4000  # exceptions
    with pytest.raises(InvalidInput, match="regex .* needs an index over 2,000 bytes, the index size budget"):
        compile_constraint(vocab, regex="[a-z]{0,20}", budget=Budget(max_bytes=2000), cache=None)
