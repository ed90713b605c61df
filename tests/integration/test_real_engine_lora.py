"""LoRA by name on the real engine: ``textproc serve --engine vllm --lora-modules
tiny-lora=...`` with the seeded adapter of the tiny model (``scripts/make_tiny_lora.py``, made
by ``scripts/setup_vllm.sh`` with peft). ``/v1/models`` lists the adapter; a greedy completion
whose model names it is the adapter's (the same text as Hugging Face transformers + peft give
with the adapter on the same prompt ids), the base model's is the base model's, and the two
differ. One engine for the module (~1 min on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.real_engine import SETUP_HINT, TINY_MODEL, VLLM_PYTHON, missing, \
    serve_vllm_textproc
from tests.helpers.service import Service

LORA = TINY_MODEL.parent / "qwen3-tiny-lora"
ADAPTER = "tiny-lora"
PROMPT_IDS = [9707, 11, 1052, 525, 498, 30, 576, 6303, 374]  # a few Qwen3 ids
MAX_TOKENS = 12


def _missing() -> str | None:
    why = missing()
    if why is None and not (LORA / "adapter_config.json").is_file():
        why = f"no LoRA adapter at {LORA}: {SETUP_HINT}"
    return why


pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]

# greedy continuations of the prompt ids by transformers, base and with the adapter (peft)
_REFERENCE = f"""
import json, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained({str(TINY_MODEL)!r})
ids = torch.tensor([{PROMPT_IDS!r}])
out = {{}}
for name in ("base", "lora"):
    model = AutoModelForCausalLM.from_pretrained({str(TINY_MODEL)!r}, dtype=torch.float32)
    if name == "lora":
        model = PeftModel.from_pretrained(model, {str(LORA)!r})
    gen = model.generate(ids, max_new_tokens={MAX_TOKENS}, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
    out[name] = tok.decode(gen[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lora_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    service, url = serve_vllm_textproc(tmp_path_factory.mktemp("textproc-lora"),
                                       "--lora-modules", f"{ADAPTER}={LORA}",
                                       "--http-arg=--runtime-lora-updating")
    try:
        yield service, url
    finally:
        service.stop(timeout_s=60)


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    done = subprocess.run([str(VLLM_PYTHON), "-c", _REFERENCE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _complete(url: str, model: str) -> dict[str, Any]:
    r = httpx.post(url + "/v1/completions", timeout=120, json={
        "model": model, "prompt": PROMPT_IDS, "max_tokens": MAX_TOKENS, "temperature": 0,
        "ignore_eos": True})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_models_lists_the_adapter(lora_service: tuple[Service, str]) -> None:
    entries = {e["id"]: e for e in httpx.get(lora_service[1] + "/v1/models", timeout=30)
               .json()["data"]}
    assert entries[ADAPTER]["root"] == str(LORA)
    assert entries[ADAPTER]["parent"] == TINY_MODEL.name


def test_a_request_naming_the_adapter_is_served_with_it(
        lora_service: tuple[Service, str], reference: dict[str, str]) -> None:
    service, url = lora_service
    assert reference["base"] != reference["lora"]  # the adapter moves the greedy answer
    base = _complete(url, TINY_MODEL.name)
    adapted = _complete(url, ADAPTER)
    assert adapted["model"] == ADAPTER
    assert base["choices"][0]["text"] == reference["base"]
    assert adapted["choices"][0]["text"] == reference["lora"]
    stats = service.stub_stats()["requests"]
    assert any(r.get("lora") == ADAPTER for r in stats.values())  # vLLM's request held it


def test_an_adapter_loaded_at_runtime_is_served_until_unloaded(
        lora_service: tuple[Service, str], reference: dict[str, str]) -> None:
    """vLLM's ``/v1/load_lora_adapter``: the engine loads the adapter under a new name, which
    answers as the adapter does; ``/v1/unload_lora_adapter`` and the name is gone."""
    _, url = lora_service
    r = httpx.post(url + "/v1/load_lora_adapter", timeout=120,
                   json={"lora_name": "again", "lora_path": str(LORA)})
    assert r.status_code == 200, r.text
    assert _complete(url, "again")["choices"][0]["text"] == reference["lora"]
    r = httpx.post(url + "/v1/unload_lora_adapter", timeout=120, json={"lora_name": "again"})
    assert r.status_code == 200, r.text
    r = httpx.post(url + "/v1/completions", timeout=120, json={
        "model": "again", "prompt": PROMPT_IDS, "max_tokens": 2})
    assert r.status_code == 404, r.text
    bad = httpx.post(url + "/v1/load_lora_adapter", timeout=120,
                     json={"lora_name": "broken", "lora_path": "/nonexistent/adapter"})
    assert bad.status_code == 404 and "No adapter found" in bad.text and "broken" not in [
        e["id"] for e in httpx.get(url + "/v1/models", timeout=30).json()["data"]], bad.text
