"""Real-world schemas (``scripts/fetch_schemas.py``): for every schema that compiles, no invalid
instance is accepted and every valid one is, as UTF-8 bytes through the minimal DFA of its
regex (``textproc/testing/schema_corpus`` says how instances are chosen and judged).

A valid instance may be rejected only by a narrowing the ``schema`` module documents; the
schemas where the corpus shows one are listed in ``NARROWED`` with the reason, so a new one
fails the test. Coverage (right / refused / wrong per source) is printed.

Default run: a fixed sample of the JSON Schema Test Suite and the function-calling tools whose
regexes are small (well under a minute on 2 quiet cores). ``-m slow`` or ``TEXTPROC_FULL_SCHEMAS=1``: the whole corpus (minutes).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from textproc.testing.schema_corpus import CORPUS, FETCH, Verdict, judge, load_corpus
from textproc.core.constraints import json_schema_to_regex
from textproc.errors import InvalidInput

FULL = os.environ.get("TEXTPROC_FULL_SCHEMAS") == "1"
SAMPLE = {"suite": 24, "bfcl": 8, "schemastore": 0}  # schemas per source in the default run
SMALL = 20_000  # the default run takes schemas whose regex is shorter (their DFAs build fast)

# valid instances outside what the regex produces, each by a documented narrowing
NARROWED = {
    "const with object": "enum/const objects keep their own key order",
    "enum with [0] does not match [false]": "numbers inside enum/const structures are written as given",
    "enum with [1] does not match [true]": "numbers inside enum/const structures are written as given",
    "integer type matches integers": "integers are written without a fraction (1, not 1.0)",
    "multiple simultaneous patternProperties are validated": "a key matching several patterns gets all their schemas",
    "regexes are not anchored by default and are case sensitive": "extra keys are typed by every pattern",
    "patternProperties with boolean schemas": "extra keys are typed by every pattern",
    "uniqueItems=false validation": "free values are nested at most any_depth deep",
    "poker_game_winner": "free values are nested at most any_depth deep",
    "validation of host names": "hostname labels: letters, digits, two inner hyphens, 15 characters between",
    "validation of internationalized host names": "idn-hostname as ASCII hostname",
    "validation of separators in internationalized host names": "idn-hostname as ASCII hostname",
    "validation of an internationalized e-mail addresses": "idn-email as ASCII email",
    "validation of IPv6 addresses": "ipv6 without embedded IPv4 or zone",
    "validation of IRIs": "iri as ASCII uri",
    "validation of IRI References": "iri-reference as ASCII uri-reference",
    "format: uri-template": "uri-template without expressions",
    "validation of URIs": "uri hosts without IP literals",
    "validation of e-mail addresses": "email: a common ASCII subset",
    "validation of regular expressions": "format regex: literal patterns only",
}


def _cases() -> list[dict[str, Any]]:
    if not CORPUS.is_file():
        return []
    cases = load_corpus()
    if FULL:
        return cases
    out = []
    for source, count in SAMPLE.items():
        mine = [c for c in cases if c["source"] == source and _small(c["schema"])]
        if count and mine:
            step = max(len(mine) // count, 1)
            out.extend(mine[::step][:count])
    return out


def _small(schema: Any) -> bool:
    try:
        return len(json_schema_to_regex(schema)) < SMALL
    except InvalidInput:
        return True  # refusals cost nothing


def _narrowed(verdict: Verdict) -> bool:
    return any(verdict.name.endswith(name) for name in NARROWED)


@pytest.mark.skipif(not CORPUS.is_file(), reason=f"no schema corpus; run: {FETCH}")
@pytest.mark.timeout(1800)
def test_corpus_schemas_judge_every_instance_right(capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = [judge(case, samples=10, budget_s=120.0) for case in _cases()]
    accepted_invalid = [(v.name, v.invalid_accepted[:2]) for v in verdicts if v.invalid_accepted]
    rejected_valid = [(v.name, v.valid_rejected[:2]) for v in verdicts if v.valid_rejected and not _narrowed(v)]
    with capsys.disabled():
        for source in sorted({v.source for v in verdicts}):
            mine = [v for v in verdicts if v.source == source and v.status != "skipped"]
            counts = Counter(v.status for v in mine)
            print(f"\nschema corpus {source}: {len(mine)} schemas, {counts['right']} right, "
                  f"{counts['refused']} refused, {counts['wrong']} narrowed or wrong; "
                  f"{sum(v.invalid for v in mine)} invalid instances, {sum(v.valid for v in mine)} valid")
    assert not accepted_invalid, accepted_invalid
    assert not rejected_valid, rejected_valid
    assert sum(v.status == "right" for v in verdicts) >= len(verdicts) // 3  # the sample is not all refusals


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_file(), reason=f"no schema corpus; run: {FETCH}")
@pytest.mark.timeout(7200)
def test_whole_corpus(request: pytest.FixtureRequest) -> None:
    if not FULL and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the whole schema corpus: run with -m slow (or TEXTPROC_FULL_SCHEMAS=1)")
    verdicts = [judge(case, samples=10, budget_s=120.0) for case in load_corpus()]
    assert not [(v.name, v.invalid_accepted[:2]) for v in verdicts if v.invalid_accepted]
    assert not [(v.name, v.valid_rejected[:2]) for v in verdicts if v.valid_rejected and not _narrowed(v)]
