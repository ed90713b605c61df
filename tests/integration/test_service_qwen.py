"""The concurrent echo mix again on the real Qwen3 vocabulary (skips when it is not built)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.service import Service, run
from tests.helpers.chat_cases import chat_cases, expected, make_case
from tests.helpers.models import model_dir
from textproc.client import TextClient, TextEvent
from textproc.core.parsing import merge_deltas
from textproc.core.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def qwen() -> Path:
    return model_dir("qwen3")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, qwen: Path) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("qwen"), qwen, workers=1,
                  args=["--max-model-len", "4096"])
    svc.start(timeout_s=120)
    yield svc
    svc.stop()


def test_300_concurrent_chats_on_qwen3_equal_the_in_process_core(service: Service, qwen: Path) -> None:
    tok = Tokenizer.from_dir(qwen)
    rng = random.Random(7)
    cases = [make_case(i, rng) for i in range(300)]

    async def main() -> list[list[TextEvent]]:
        async with await TextClient.connect(service.runtime_dir, timeout_s=60) as client:
            return await chat_cases(client, cases, "q", 150)

    for i, (case, events) in enumerate(zip(cases, run(main))):
        want = expected(tok, case, f"q-{i}")
        label = f"request q-{i} (seed 7): {case}"
        assert merge_deltas(d for e in events for d in e.deltas) == want["merged"], label
        assert (events[-1].finish_reason, events[-1].stop) == (want["finish_reason"], want["stop"]), label
        assert events[-1].usage is not None
        assert events[-1].usage.prompt_tokens == want["prompt_tokens"], label
