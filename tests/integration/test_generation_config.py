"""``serve`` with the default ``--generation-config auto``: the engine receives the model's
generation_config.json values for what a request left unset, as ``vllm serve`` samples with
them. The test is the engine (``--engine external``, an EngineLink here), so it sees exactly
the ``IncomingRequest`` an engine adapter gets. A malformed file stops ``serve`` before any
process starts, and so does a malformed eos_token_id with ``--generation-config none``; the
file's eos_token_id reaches the engine as stop and EOS ids. One service start and two refused
starts, ~4 s together."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from tests.helpers.service import REPO, Service, run
from textproc.client import TextClient
from textproc.core.tokenizer import Tokenizer
from textproc.engine import EngineLink, IncomingRequest

pytestmark = pytest.mark.timeout(120)


async def _finish(events: AsyncIterator[Any]) -> str | None:
    finish = None
    async for event in events:
        finish = event.finish_reason or finish
    return finish


def test_the_engine_receives_the_models_defaults_for_unset_values(tmp_path: Path,
                                                                   toy_model: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    (model / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": 0, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_new_tokens": 7}))
    service = Service(tmp_path / "s", model, workers=1, engine="external").start()
    try:
        addresses = service.engine_addresses()
        with EngineLink.connect(addresses["engine_in"], addresses["engine_out"]) as link:

            async def main() -> tuple[dict[str, IncomingRequest], list[str | None]]:
                async with await TextClient.connect(service.runtime_dir) as client:
                    messages = [{"role": "user", "content": "hi"}]
                    tasks = [asyncio.create_task(_finish(stream)) for stream in (
                        client.chat(messages, request_id="plain"),
                        client.chat(messages, request_id="own", max_tokens=2,
                                    params={"temperature": 0.1, "seed": 5}),
                        client.complete("hi", request_id="text"))]
                    seen: dict[str, IncomingRequest] = {}
                    deadline = time.monotonic() + 30
                    while len(seen) < 3 and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                        seen.update((r.request_id, r) for r in link.poll_requests())
                    assert len(seen) == 3, f"the engine got only {sorted(seen)}:\n{service.log()}"
                    ids = sorted(seen)
                    link.send_step(ids, [seen[rid].prompt_token_ids[0] for rid in ids],
                                   finished={i: "length" for i in range(len(ids))})
                    finishes = await asyncio.wait_for(asyncio.gather(*tasks), 30)
                    return seen, list(finishes)

            seen, finishes = run(main)
    finally:
        service.stop()
    assert finishes == ["length"] * 3
    defaults = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    for rid in ("plain", "text"):  # chat and completion alike
        assert seen[rid].sampling == defaults and seen[rid].max_tokens == 7, rid
    # the request's own values win key by key; the file fills the rest
    assert seen["own"].sampling == {**defaults, "temperature": 0.1, "seed": 5}
    assert seen["own"].max_tokens == 2
    assert "generation_config.json: {'temperature': 0.6" in service.log()
    # its eos_token_id ends requests beside the tokenizer's EOS, as in vLLM; the engine gets
    # them as stop ids and as the EOS ids it masks until min_tokens
    eos = Tokenizer.from_dir(model).eos_token_id
    assert eos is not None and eos != 0
    ends = [0, eos]
    for request in seen.values():
        assert request.stop_token_ids == ends == request.eos_token_ids
    assert re.search(r"requests also end at eos_token_id \[0\] of \S+generation_config\.json",
                     service.log())


def test_a_malformed_generation_config_stops_serve_before_it_starts(tmp_path: Path,
                                                                    toy_model: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    (model / "generation_config.json").write_text('{"temperature": 0.6, "top_k": "20"}')
    argv = [sys.executable, "-m", "textproc.cli", "serve", "--model-dir", str(model),
            "--runtime-dir", str(tmp_path / "run")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert re.search(r"textproc serve: top_k='20' at \$\.top_k in \S+generation_config\.json is "
                     r"not an integer; fix the file, or serve with --generation-config none",
                     done.stderr), done.stderr
    assert not (tmp_path / "run").exists()  # no process started
    # --generation-config none skips the sampling keys, not eos_token_id (vLLM reads it then too)
    (model / "generation_config.json").write_text('{"top_k": "20", "eos_token_id": "<|im_end|>"}')
    done = subprocess.run([*argv, "--generation-config", "none"], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert re.search(r"textproc serve: eos_token_id='<\|im_end\|>' at \$\.eos_token_id in "
                     r"\S+generation_config\.json; allowed: a token id", done.stderr), done.stderr
    assert not (tmp_path / "run").exists()
