"""Where the real chat templates fetched by scripts/fetch_templates.py live, and how tests find them.

A test that needs a real template calls ``template_path("qwen3")`` (a short name below, or the file
name without ``.jinja``); when the file is missing the test skips with the command that fetches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = REPO_ROOT / ".cache" / "templates"
FETCH_HINT = "fetch them with: .venv/bin/python scripts/fetch_templates.py"

# short name -> template file (from llama.cpp's models/templates, vendored in llama-cpp-python)
REAL_TEMPLATES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",  # tools + enable_thinking + reasoning_content
    "qwq": "Qwen-QwQ-32B.jinja",  # pre-fills <think>\n
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",  # tools, date_string
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",  # tools, strftime_now
    "hermes3": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",  # tool_use, macros
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",  # tools, raise_exception on ids
    "deepseek-r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",  # <｜Assistant｜><think>\n
    "gemma2": "google-gemma-2-2b-it.jinja",  # raise_exception on system role
    "phi3.5": "microsoft-Phi-3.5-mini-instruct.jinja",
    "granite3.3": "ibm-granite-granite-3.3-2B-Instruct.jinja",  # documents, thinking variable
    "command-r7b": "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",  # tools, documents
    "gpt-oss": "openai-gpt-oss-120b.jinja",  # strftime_now, thinking field
    "kimi-k2": "moonshotai-Kimi-K2.jinja",
    # from the later package version (scripts/fetch_templates.py EXTRA_VERSION)
    "qwen3-coder": "Qwen3-Coder.jinja",
    "qwen3.5": "Qwen3.5-4B.jinja",
    "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1.jinja",
    "glm-4.6": "GLM-4.6.jinja",
    "glm-4.7": "GLM-4.7-Flash.jinja",
    "granite4": "ibm-granite-granite-4.0.jinja",
    "ministral3-reasoning": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "mistral-small-3.2": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "devstral": "unsloth-mistral-Devstral-Small-2507.jinja",
    "llama3.3": "meta-llama-Llama-3.3-70B-Instruct.jinja",
}
# templates only the format choice reads (they call list.append, which the sandbox refuses
# as transformers' does, so they are not in the rendering parity tests)
FORMAT_ONLY_TEMPLATES = {
    "kimi-k2-instruct": "Kimi-K2-Instruct.jinja",
    "kimi-k2-thinking": "Kimi-K2-Thinking.jinja",
    # the tool-call formats' round trips (tests/unit/test_parsing_detect.py)
    "deepseek-v3.2": "deepseek-ai-DeepSeek-V3.2.jinja",
    "deepseek-v4": "deepseek-ai-DeepSeek-V4.jinja",
    "minimax-m2": "MiniMax-M2.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
    "seed-oss": "ByteDance-Seed-OSS.jinja",
    "nemotron-nano-v2": "NVIDIA-Nemotron-Nano-v2.jinja",
    "nemotron3-nano": "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    "step3.5-flash": "StepFun3.5-Flash.jinja",
    "lfm2.5": "LFM2.5-8B-A1B.jinja",
    "hy3": "tencent-Hy3.jinja",
    "kimi-k3": "Kimi-K3.jinja",
    "firefunction-v2": "fireworks-ai-llama-3-firefunction-v2.jinja",
    "phi4-mini": "microsoft-Phi-4-mini-instruct.jinja",  # from the npm package (no tool-call rendering)
}


def template_path(name: str) -> Path:
    """The cached template file ``name``, or skip the calling test with a fetch hint."""
    known = {**REAL_TEMPLATES, **FORMAT_ONLY_TEMPLATES}
    file_name = known.get(name, name if name.endswith(".jinja") else f"{name}.jinja")
    path = TEMPLATES_DIR / file_name
    if not path.is_file():
        pytest.skip(f"real chat template {name!r} missing at {path}; {FETCH_HINT}")
    return path


def template_source(name: str) -> str:
    """The template text exactly as transformers reads a chat_template.jinja file."""
    with open(template_path(name), encoding="utf-8") as handle:
        return handle.read()
