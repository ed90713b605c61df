#!/usr/bin/env python3
"""Fetch real model chat templates from a registry package into .cache/templates/ (never committed).

The llama-cpp-python source distribution vendors llama.cpp, whose ``models/templates/`` holds the
chat templates of real models as published with their tokenizers (Qwen3, QwQ, Qwen2.5, Llama 3.1/
3.2/3.3, Mistral Nemo/Small/Devstral, DeepSeek R1 distills, Gemma 2, Phi-3.5, Hermes 2/3 tool_use,
Command R, Granite 3.3, Kimi K2, gpt-oss, functionary, firefunction). We fetch it with
``pip download --no-deps --no-binary :all:`` (pinned version), extract only those ``*.jinja``
files, and write a ``manifest.json`` naming the package, version and files. A later version of
the same package (``EXTRA_VERSION``) adds the families the first one lacks (Qwen3-Coder, DeepSeek
V3.1 / V3.2 / V4, GLM-4.6 / 4.7, Kimi K2 Instruct / Thinking, Granite 4, Ministral 3 Reasoning,
MiniMax M2 / M3, Gemma 4, Seed-OSS, Nemotron, Step 3.5, LFM2.5, Hunyuan 3, Kimi K3); only files
not already taken from the first are kept, so the bytes of the first set never change.

Templates llama.cpp does not carry come from the npm package ``@huggingface/ollama-utils``
(``npm pack``, pinned): its ``src/chat-template-automap.ts`` maps Ollama library models to the
chat template of their GGUF files, the model's own template as published (Phi-4-mini's). Without
``npm`` on the PATH these are skipped with a warning (the tests that need them skip).

Usage: ``python scripts/fetch_templates.py [--force]`` (no arguments needed). Idempotent: when the
manifest matches the pinned package and every file is present it returns at once.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

__all__ = ["main", "fetch", "TEMPLATES_DIR", "PACKAGE", "VERSION"]

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPO_ROOT / ".cache" / "templates"
PACKAGE = "llama-cpp-python"
VERSION = "0.3.16"  # checked: its sdist carries vendor/llama.cpp/models/templates/*.jinja (26 files)
EXTRA_VERSION = "0.3.36"  # checked: its sdist carries 71 templates, the tool-format families above
MEMBER_DIR = "/vendor/llama.cpp/models/templates/"
# Templates the tests rely on; the fetch fails loudly if the package stops carrying one.
REQUIRED = (
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen-QwQ-32B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "google-gemma-2-2b-it.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
    "openai-gpt-oss-120b.jinja",
    "moonshotai-Kimi-K2.jinja",
)
REQUIRED_EXTRA = (
    "Qwen3-Coder.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "GLM-4.6.jinja",
    "GLM-4.7-Flash.jinja",
    "Kimi-K2-Instruct.jinja",
    "Kimi-K2-Thinking.jinja",
    "ibm-granite-granite-4.0.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "Qwen3.5-4B.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",
    "deepseek-ai-DeepSeek-V4.jinja",
    "MiniMax-M2.jinja",
    "MiniMax-M3.jinja",
    "google-gemma-4-31B-it.jinja",
    "ByteDance-Seed-OSS.jinja",
    "NVIDIA-Nemotron-Nano-v2.jinja",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    "StepFun3.5-Flash.jinja",
    "LFM2.5-8B-A1B.jinja",
    "tencent-Hy3.jinja",
    "Kimi-K3.jinja",
)
# npm: model name in the package's map -> template file written
NPM_PACKAGE = "@huggingface/ollama-utils"
NPM_VERSION = "0.0.18"  # checked: src/chat-template-automap.ts holds 95 models' GGUF templates
NPM_MEMBER = "package/src/chat-template-automap.ts"
NPM_TEMPLATES = {"library/phi4-mini:3.8b": "microsoft-Phi-4-mini-instruct.jinja"}
_NPM_ENTRY = re.compile(r'model: "([^"]+)",\s*gguf: ("(?:[^"\\]|\\.)*")')


def _cached(out_dir: Path) -> list[str] | None:
    manifest = out_dir / "manifest.json"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files", [])
    if data.get("package") != PACKAGE or data.get("version") != VERSION:
        return None
    if data.get("extra_version") != EXTRA_VERSION:
        return None
    if shutil.which("npm") and data.get("npm_version") != NPM_VERSION:
        return None
    if not all((out_dir / name).is_file() for name in files):
        return None
    return list(files)


def _download(work: Path, version: str = VERSION) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "-q", "-d", str(work), f"{PACKAGE}=={version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"fetch_templates: pip download {PACKAGE}=={version} failed:\n{proc.stderr[-2000:]}")
    archives = sorted(work.glob("*.tar.gz"))
    if not archives:
        raise SystemExit(f"fetch_templates: pip download left no .tar.gz in {work}")
    return archives[0]


def _extract(archive: Path, out_dir: Path, *, skip: frozenset[str] = frozenset()) -> list[str]:
    names: list[str] = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if not member.isfile() or MEMBER_DIR not in member.name or not member.name.endswith(".jinja"):
                continue
            name = member.name.rsplit("/", 1)[1]
            if name in skip:
                continue
            handle = tar.extractfile(member)
            if handle is None:
                continue
            data = handle.read()
            data.decode("utf-8")  # a template must be UTF-8 text; fail here rather than in a test
            (out_dir / name).write_bytes(data)  # exact bytes: trailing newlines matter to rendering
            names.append(name)
    return sorted(names)


def _npm_templates(work: Path, out_dir: Path) -> list[str]:
    """The templates of ``NPM_TEMPLATES`` from the pinned npm package; [] without npm."""
    npm = shutil.which("npm")
    if npm is None:
        print(f"fetch_templates: warning: no npm on the PATH; skipping {sorted(NPM_TEMPLATES.values())}",
              file=sys.stderr)
        return []
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([npm, "pack", "--silent", "--pack-destination", str(work),
                           f"{NPM_PACKAGE}@{NPM_VERSION}"], capture_output=True, text=True, timeout=300)
    archives = sorted(work.glob("*.tgz"))
    if proc.returncode != 0 or not archives:
        raise SystemExit(f"fetch_templates: npm pack {NPM_PACKAGE}@{NPM_VERSION} failed:\n{proc.stderr[-2000:]}")
    with tarfile.open(archives[0], "r:gz") as tar:
        handle = tar.extractfile(NPM_MEMBER)
        if handle is None:
            raise SystemExit(f"fetch_templates: {NPM_PACKAGE}@{NPM_VERSION} lacks {NPM_MEMBER}")
        source = handle.read().decode("utf-8")
    found = {model: json.loads(literal) for model, literal in _NPM_ENTRY.findall(source)}
    missing = [model for model in NPM_TEMPLATES if model not in found]
    if missing:
        raise SystemExit(f"fetch_templates: {NPM_PACKAGE}@{NPM_VERSION} lacks {missing}")
    for model, name in NPM_TEMPLATES.items():
        (out_dir / name).write_text(found[model], encoding="utf-8")
    return sorted(NPM_TEMPLATES.values())


def fetch(out_dir: Path = TEMPLATES_DIR, *, force: bool = False) -> list[str]:
    """Make sure the templates are in ``out_dir``; return their file names."""
    if not force:
        cached = _cached(out_dir)
        if cached is not None:
            return cached
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="textproc-templates-") as tmp:
        names = _extract(_download(Path(tmp) / "first"), out_dir)
        extra = _extract(_download(Path(tmp) / "extra", EXTRA_VERSION), out_dir, skip=frozenset(names))
        from_npm = _npm_templates(Path(tmp) / "npm", out_dir)
    missing = [name for name in REQUIRED if name not in names]
    missing += [name for name in REQUIRED_EXTRA if name not in extra]
    if missing:
        raise SystemExit(f"fetch_templates: {PACKAGE}=={VERSION} / {EXTRA_VERSION} lack {missing}")
    names = sorted(names + extra + from_npm)
    manifest = {"package": PACKAGE, "version": VERSION, "extra_version": EXTRA_VERSION,
                "member_dir": MEMBER_DIR, "files": names}
    if from_npm:
        manifest.update(npm_package=NPM_PACKAGE, npm_version=NPM_VERSION, npm_member=NPM_MEMBER)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="download again even when cached")
    parser.add_argument("--out", type=Path, default=TEMPLATES_DIR, help="target directory")
    args = parser.parse_args(argv)
    start = time.monotonic()
    names = fetch(args.out, force=args.force)
    took = time.monotonic() - start
    print(f"templates: {len(names)} chat templates from {PACKAGE}=={VERSION} and =={EXTRA_VERSION} "
          f"(and {NPM_PACKAGE}@{NPM_VERSION}) in {args.out} ({took:.1f} s)")
    for name in names:
        print(f"  {name}  ({(args.out / name).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
