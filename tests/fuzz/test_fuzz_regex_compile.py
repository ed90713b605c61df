"""Fuzz the constraint compiler's front end: any string as a regex gives a token index or an
``InvalidInput`` (never another exception), and an index it gives agrees with Python's
``re.fullmatch`` on random strings (when ``re`` accepts the pattern too).

Random patterns are drawn from regex pieces (literals, classes, escapes, groups, quantifiers,
anchors, lookarounds, backreferences, flags) glued at random, plus raw random text.
Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_regex_compile.py``.
"""

from __future__ import annotations

import random
import re
import warnings

from hypothesis import given
from hypothesis import strategies as st

from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput

PIECES = ["a", "b", "é", "中", "😀", ".", "\\d", "\\w", "\\s", "\\S", "\\W", "[a-c]", "[^a]", "[^\\n]",
          "[\\u4e00-\\u9fff]", "\\x41", "\\u00e9", "\\n", "\\t", "\\.", "\\\\", "(", ")", "(?:", "(?P<n>",
          "|", "*", "+", "?", "*?", "{2}", "{1,3}", "{,2}", "{2,}", "{", "}", "^", "$", "\\A", "\\Z",
          "(?=", "(?!", "(?<=", "\\1", "(?i)", "\\b", "[", "]", "-", "\\p{L}", "\\P{N}", "\\N{BULLET}",
          "*+", "\\", "[]a]", "[a-]", "\\0", "\\08"]
VOCAB = TokenVocabulary([bytes([b]) for b in range(256)] + [b"ab", "é".encode(), "中".encode(), b""],
                        end_ids=[259])
POOL = "ab.é中😀 \n1A_-"
patterns = st.one_of(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), st.text(max_size=12))


@given(patterns, st.integers(0, 2**32))
def test_any_pattern_compiles_or_is_invalid_input(pattern: str, seed: int) -> None:
    budget = Budget(max_states=2000, max_seconds=5.0)
    try:
        index = compile_constraint(VOCAB, regex=pattern, budget=budget, cache=None)
    except InvalidInput:
        return
    assert index.n_states >= 1
    try:
        with warnings.catch_warnings():  # "possible nested set" and the like: same language today
            warnings.simplefilter("ignore")
            reference = re.compile(pattern)
    except (re.error, OverflowError, RecursionError):
        return  # Python rejects what we accept (e.g. an unknown escape we read literally): not compared
    dfa = build_dfa(parse_regex(pattern), Budget())
    rng = random.Random(seed)
    for _ in range(30):
        text = "".join(rng.choice(POOL) for _ in range(rng.randint(0, 5)))
        state = dfa.walk(dfa.start, text.encode())
        ours = state >= 0 and dfa.accepting[state]
        assert ours == bool(reference.fullmatch(text)), (pattern, text)
