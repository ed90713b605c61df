#!/usr/bin/env python3
"""Build the real-world JSON Schema corpus in .cache/schemas/ from registry packages (git-ignored).

    .venv/bin/python scripts/fetch_schemas.py [--force]

Sources (pinned package versions), each schema with instances whose verdict is known:
- ``suite``: the JSON Schema Test Suite as the PyPI ``jsonschema`` sdist vendors it
  (``json/tests/draft2020-12``, its ``optional/format`` cases, and ``draft7`` for draft-7-only
  keywords such as ``dependencies``): per case a schema, valid and invalid instances.
- ``schemastore``: the SchemaStore schemas PyPI ``check-jsonschema`` vendors (CI configs,
  GitHub workflows, compose files, ...) with the example files of its sdist (``positive`` /
  ``negative`` instances, YAML or JSON).
- ``bfcl``: function-calling tools from the PyPI ``bfcl-eval`` wheel (Berkeley Function
  Calling Leaderboard data), parameters converted to JSON Schema the way its OpenAI handler
  does (``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ...), with the
  ground-truth arguments as valid instances.

Writes ``.cache/schemas/corpus.jsonl``: one ``{"source", "name", "schema", "valid": [...],
"invalid": [...]}`` per line. Verdicts are not taken on trust: the tests and the benchmark
re-check every instance with ``jsonschema`` (formats asserted) and drop the ones it disagrees on.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from textproc.testing.tool_sets import bfcl_schema

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = REPO_ROOT / ".cache" / "schemas"
DOWNLOADS_DIR = REPO_ROOT / ".cache" / "downloads"
CORPUS = OUT_DIR / "corpus.jsonl"
RECIPE = 1  # bump when the output changes

JSONSCHEMA = ("jsonschema", "4.26.0", "sdist")
CHECK_JSONSCHEMA = ("check-jsonschema", "0.39.0", "sdist")
BFCL = ("bfcl-eval", "2026.3.23", "wheel")

BFCL_FILES = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
              "live_multiple", "live_parallel", "live_parallel_multiple"]
SUITE_DIRS = ["draft2020-12", "draft2020-12/optional/format", "draft7"]


def _download(package: str, version: str, kind: str) -> Path:
    DOWNLOADS_DIR.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_").lower()
    suffix = ".tar.gz" if kind == "sdist" else ".whl"
    for path in DOWNLOADS_DIR.iterdir():
        if path.name.lower().startswith(f"{stem}-{version}") and path.name.endswith(suffix):
            return path
    binary = ["--no-binary=:all:"] if kind == "sdist" else ["--only-binary=:all:"]
    with tempfile.TemporaryDirectory(dir=DOWNLOADS_DIR) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *binary,
               "--disable-pip-version-check", "-q", "-d", tmp, f"{package}=={version}"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        got = [p for p in Path(tmp).iterdir() if p.name.endswith(suffix)]
        if result.returncode != 0 or not got:
            raise SystemExit(f"pip download {package}=={version} failed: {result.stderr.strip()[-500:]}")
        target = DOWNLOADS_DIR / got[0].name
        got[0].rename(target)
        return target


def _members(archive: Path) -> dict[str, bytes]:
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            return {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    out = {}
    with tarfile.open(archive, "r:gz") as tf:
        for m in tf.getmembers():
            f = tf.extractfile(m) if m.isfile() else None
            if f is not None:
                out[m.name.split("/", 1)[1]] = f.read()
    return out


def suite_cases() -> list[dict[str, Any]]:
    files = _members(_download(*JSONSCHEMA))
    cases = []
    for folder in SUITE_DIRS:
        prefix = f"json/tests/{folder}/"
        for name in sorted(files):
            if not name.startswith(prefix) or "/" in name[len(prefix):] or not name.endswith(".json"):
                continue
            keyword = name[len(prefix):-5]
            if folder == "draft2020-12" and keyword == "format":
                continue  # format as an annotation only; optional/format has the assertions
            for group in json.loads(files[name]):
                cases.append({
                    "source": "suite", "name": f"{folder}/{keyword}: {group['description']}",
                    "schema": group["schema"],
                    "valid": [t["data"] for t in group["tests"] if t["valid"]],
                    "invalid": [t["data"] for t in group["tests"] if not t["valid"]],
                })
    return cases


def _instance(name: str, data: bytes) -> Any:
    text = data.decode("utf-8")
    if name.endswith(".json"):
        return json.loads(text)
    if name.endswith((".yaml", ".yml")):
        import yaml

        # round-trip through JSON so dates and other YAML-only scalars become strings; files
        # with custom tags (GitLab's !reference) are skipped
        try:
            return json.loads(json.dumps(yaml.safe_load(io.StringIO(text)), default=str))
        except yaml.YAMLError:
            return None
    return None


def schemastore_cases() -> list[dict[str, Any]]:
    files = _members(_download(*CHECK_JSONSCHEMA))
    vendor = "src/check_jsonschema/builtin_schemas/vendor/"
    cases = []
    for name in sorted(files):
        if not name.startswith(vendor) or not name.endswith(".json") or "/" in name[len(vendor):]:
            continue
        hook = name[len(vendor):-5]
        case: dict[str, Any] = {"source": "schemastore", "name": hook,
                                "schema": json.loads(files[name]), "valid": [], "invalid": []}
        for verdict, key in (("positive", "valid"), ("negative", "invalid")):
            prefix = f"tests/example-files/hooks/{verdict}/{hook}/"
            for example in sorted(n for n in files if n.startswith(prefix)):
                value = _instance(example, files[example])
                if value is not None:
                    case[key].append(value)
        cases.append(case)
    return cases


def bfcl_cases() -> list[dict[str, Any]]:
    files = _members(_download(*BFCL))
    seen: dict[str, dict[str, Any]] = {}
    for stem in BFCL_FILES:
        questions = files[f"bfcl_eval/data/BFCL_v4_{stem}.json"].decode().splitlines()
        answers = {}
        answer_file = f"bfcl_eval/data/possible_answer/BFCL_v4_{stem}.json"
        for line in files.get(answer_file, b"").decode().splitlines():
            entry = json.loads(line)
            answers[entry["id"]] = entry["ground_truth"]
        for line in questions:
            entry = json.loads(line)
            for function in entry["function"]:
                schema = bfcl_schema(function.get("parameters", {"type": "object", "properties": {}}))
                key = json.dumps(schema, sort_keys=True)
                case = seen.setdefault(key, {"source": "bfcl", "name": function["name"], "schema": schema,
                                             "valid": [], "invalid": []})
                for call in answers.get(entry["id"], []):
                    args = call.get(function["name"])
                    if isinstance(args, dict) and len(case["valid"]) < 4:
                        # each parameter lists its accepted values; "" means "may be left out"
                        value = {k: v[0] for k, v in args.items() if isinstance(v, list) and v and v[0] != ""}
                        if value not in case["valid"]:
                            case["valid"].append(value)
    return list(seen.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--force", action="store_true", help="rebuild even if the corpus is current")
    args = p.parse_args(argv)
    stamp = OUT_DIR / "recipe.json"
    if not args.force and CORPUS.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == RECIPE:
        print(f"schemas: {CORPUS} is current")
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    counts = {}
    with open(CORPUS.with_suffix(".tmp"), "w", encoding="utf-8") as out:
        for source, build in (("suite", suite_cases), ("schemastore", schemastore_cases), ("bfcl", bfcl_cases)):
            cases = build()
            counts[source] = len(cases)
            for case in cases:
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
    CORPUS.with_suffix(".tmp").replace(CORPUS)
    stamp.write_text(json.dumps(RECIPE))
    print(f"schemas: {counts} -> {CORPUS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
