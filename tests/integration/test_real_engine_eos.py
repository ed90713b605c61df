"""The end ids come from the model's generation config, in textproc as in ``vllm serve``: a copy
of the tiny Qwen3 model whose generation_config.json names ``<|im_start|>`` (a special token no
end-token name list holds) and drops ``<|endoftext|>``. Both servers stop on the first, write
the second without stopping. Starts its own pair of servers (~2 min on 2 cores): ``-m slow``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.real_engine import TINY_MODEL, missing, reference_server, serve_vllm_textproc
from tests.helpers.service import Service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

IM_START, ENDOFTEXT, IM_END = 151644, 151643, 151645


def _slow_requested(config: pytest.Config) -> bool:
    markexpr = config.option.markexpr or ""
    return "slow" in markexpr and "not slow" not in markexpr


@pytest.fixture(scope="module")
def servers(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str, str]]:
    if not _slow_requested(request.config):
        pytest.skip("starts its own vLLM pair (~2 min): run with -m slow")
    # the same weights and tokenizer (links), served under the same name, another end-id list
    model = tmp_path_factory.mktemp("eos-model") / TINY_MODEL.name
    model.mkdir()
    for path in TINY_MODEL.iterdir():
        if path.name != "generation_config.json":
            (model / path.name).symlink_to(path)
    (model / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, IM_START]}))
    reference = reference_server(tmp_path_factory.mktemp("vllm-serve"), model).start()
    service = None
    try:
        service, url = serve_vllm_textproc(tmp_path_factory.mktemp("textproc-vllm"), model=model)
        yield service, url, reference.wait()
    finally:
        reference.stop()
        if service is not None:
            service.stop(timeout_s=60)


def _chat(url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(url + "/v1/chat/completions", timeout=120,
                      json={"model": TINY_MODEL.name, **body})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


@pytest.mark.parametrize(("token_id", "reason", "tokens"), [
    (IM_START, "stop", 1),  # named in the file: ends the request
    (ENDOFTEXT, "length", 5),  # the tokenizer's pad token, named nowhere now: ends nothing
], ids=["im_start-ends", "endoftext-does-not"])
def test_the_generation_configs_end_ids_and_no_others(servers: tuple[Service, str, str],
                                                      token_id: int, reason: str, tokens: int) -> None:
    _, url, reference = servers
    body = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 5,
            "logit_bias": {str(token_id): 100}}
    ours, theirs = _chat(url, body), _chat(reference, body)
    assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"] == reason
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == tokens
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
