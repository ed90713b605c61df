"""The byte DFA ``build_dfa`` returns is minimal: no two of its states accept the same
suffixes (checked by Moore's partition refinement on the result, an independent algorithm),
for random regexes built from the pieces JSON schemas use."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from textproc.core.constraints import Budget
from textproc.core.constraints.automaton.dfa import ByteDFA, build_dfa
from textproc.core.constraints.regex.syntax import parse_regex

PIECES = ["a", "b", "ab", "[a-c]", "[^a]", "é", "\\d", '"', "\\\\", "(?:a|bc)", "(?:ab)?", "x*", "[0-9]{1,3}",
          "(?:, a)?", "b+"]
regexes = st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join),
                   min_size=1, max_size=4).map("|".join)


def _moore_blocks(dfa: ByteDFA) -> int:
    n = dfa.n_states
    block = [int(a) for a in dfa.accepting] + [2]  # the dead state (-1) is its own block
    count = len(set(block))
    while True:
        sigs: dict[tuple[int, ...], int] = {}
        new = [sigs.setdefault((block[q], *(block[t] for t in dfa.rows[q])), len(sigs)) for q in range(n)]
        new.append(sigs.setdefault((-1,), len(sigs)))
        if len(sigs) == count:
            return count - 1  # without the dead state
        block, count = new, len(sigs)


@given(regexes)
def test_the_dfa_is_minimal(pattern: str) -> None:
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert _moore_blocks(dfa) == dfa.n_states, pattern
