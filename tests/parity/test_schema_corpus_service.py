"""A seeded sample of the real-world schema corpus (``scripts/fetch_schemas.py``: SchemaStore,
BFCL tools, the JSON Schema Test Suite) through the service's own compile path, in the default
run: ``structured_regex({"json": schema})`` -> ``WorkerConstraints.compile`` of a worker built
with ``textproc serve``'s defaults (``MAX_COMPILE_S`` wall seconds from arrival, the default
index byte budget), the whole index of a progressive compile included.

For every schema the service accepts, each valid instance's Qwen3 token ids walk the index to a
state that allows the end id, and no invalid instance's do (the corpus's own and invalid
mutations of the valid ones, ``textproc/testing/schema_corpus``), but for the documented
narrowings (``NARROWED``: the sample's schemas where the corpus shows one, with the reason
``textproc.core.constraints.schema.to_regex`` gives) and widenings (bounds over ``MAX_EXACT_COUNT``).
Every schema the service refuses is refused for the reason ``REFUSED`` lists (today's
refusals in this sample): a new refusal, or one for another reason, fails the test.

The judging code is the coverage benchmark's (``bench/_constraints_coverage.py``, loaded by
path), so bench/README.md's coverage numbers and this test count the same way. The sample: per
source a seeded shuffle, then the first schemas ``jsonschema`` can use whose regex is under
``SMALL`` characters (each compiles in well under a second of CPU; one refused before its
regex is made counts as small). 15-20 s on the 2-core box at load 3-4 (~45 s at load 6), a
third of it the worker's vocabulary tables.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from collections import Counter
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.models import REPO_ROOT, model_dir
from textproc.errors import InvalidInput
from textproc.service.constraints import structured_regex
from textproc.testing.schema_corpus import CORPUS, FETCH, case_instances, load_corpus

SEED = 20261207
SAMPLE = {"schemastore": 10, "bfcl": 8, "suite": 10}  # schemas per source
SMALL = 30_000  # regex characters (SchemaStore's changie and github-discussion are in, codecov is not)
# valid instances outside what the regex produces, each by a documented narrowing
NARROWED = {
    "draft2020-12/optional/format/regex: validation of regular expressions": "format regex: literal patterns only",
    "draft2020-12/optional/format/uri-template: format: uri-template": "uri-template without expressions",
}
# the sample's refusals today, by name: (kind, what the message names)
KEYWORD, SIZE = "unsupported keyword", "budget size/states"
REFUSED = {
    "travis": (KEYWORD, "uniqueItems at"),
    "readthedocs": (KEYWORD, "keyword 'if'"),
    "github-workflows": (KEYWORD, "keyword 'not'"),
    "mergify": (KEYWORD, "keyword 'maxProperties'"),
    "bamboo-spec": (KEYWORD, "keyword 'maxProperties'"),
    "azure-pipelines": (SIZE, "distributes into over"),
    "citation-file-format": (KEYWORD, "email.pattern"),  # \S inside a character class
    "meltano": (KEYWORD, "keyword 'propertyNames'"),
    "drone-ci": (KEYWORD, "oneOf at"),
    "draft2020-12/unevaluatedProperties: unevaluatedProperties can't see inside cousins (reverse order)":
        (KEYWORD, "keyword 'unevaluatedProperties'"),
    "draft2020-12/unevaluatedProperties: unevaluatedProperties with adjacent properties":
        (KEYWORD, "keyword 'unevaluatedProperties'"),
    "draft2020-12/not: forbidden property": (KEYWORD, "keyword 'not'"),
    "draft2020-12/oneOf: oneOf with missing optional property": (KEYWORD, "oneOf at"),
}


def _coverage() -> ModuleType:
    """bench/_constraints_coverage.py (bench/ holds scripts, not a package)."""
    path = REPO_ROOT / "bench" / "_constraints_coverage.py"
    spec = importlib.util.spec_from_file_location("_constraints_coverage", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _usable(case: dict[str, Any]) -> bool:
    """``jsonschema`` can judge the case (no remote refs) and its regex is small."""
    try:
        case_instances(case, mutate=False)
    except Exception:  # what jsonschema raises on a schema it cannot use varies
        return False
    try:
        return len(structured_regex({"json": case["schema"]})) < SMALL
    except InvalidInput:
        return True  # refused before any compile work


def sample(seed: int) -> list[dict[str, Any]]:
    """``SAMPLE[source]`` usable schemas of each source, in a shuffle seeded by ``seed``."""
    cases = load_corpus()
    out: list[dict[str, Any]] = []
    for source, count in SAMPLE.items():
        mine = [c for c in cases if c["source"] == source]
        random.Random(f"{seed}:{source}").shuffle(mine)
        out.extend(itertools.islice((c for c in mine if _usable(c)), count))
    return out


@pytest.mark.skipif(not CORPUS.is_file(), reason=f"no schema corpus; run: {FETCH}")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [SEED], ids=lambda s: f"seed={s}")
def test_corpus_sample_through_the_service_path(seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_dir("qwen3")  # skips with the fetch hint when missing
    coverage = _coverage()
    worker, tokenizer = coverage.service_worker(model)
    cases = sample(seed)
    verdicts = [coverage.service_verdict(case, worker, tokenizer) for case in cases]
    with capsys.disabled():
        for source in SAMPLE:
            mine = [v for v in verdicts if v.source == source]
            counts = Counter(v.status for v in mine)
            print(f"\nservice path, {source} (seed {seed}): {len(mine)} schemas, {counts['right']} right, "
                  f"{counts['refused']} refused ({dict(Counter(v.kind for v in mine if v.kind))}), "
                  f"{counts['wrong']} narrowed or wrong; {sum(v.valid for v in mine)} valid instances, "
                  f"{sum(v.invalid for v in mine)} invalid; {sum(v.wall_s for v in mine):.1f} s compiling")
    assert Counter(c["source"] for c in cases) == Counter(SAMPLE), "the corpus has fewer usable schemas"
    assert not [v.name for v in verdicts if v.status == "skipped"]
    refused = {v.name: (v.kind, v.reason) for v in verdicts if v.status == "refused"}
    new = {name: reason for name, (kind, reason) in refused.items() if REFUSED.get(name, ("",))[0] != kind}
    assert not new, f"refused now, not before (or for another reason): {new}"
    for name, (kind, reason) in refused.items():
        assert REFUSED[name][1] in reason, (name, reason)
    assert len(refused) <= len(REFUSED)
    assert not [(v.name, v.invalid_accepted[:2]) for v in verdicts if v.invalid_accepted]
    assert not [(v.name, v.valid_rejected[:2]) for v in verdicts if v.valid_rejected and v.name not in NARROWED]
    # what the sample exercises: accepted schemas of every source, instances walked on each
    for source in SAMPLE:
        judged = [v for v in verdicts if v.source == source and v.status in ("right", "wrong")]
        assert judged and sum(v.valid for v in judged) > 0, source
