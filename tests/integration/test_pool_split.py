"""One long prompt across the pool (service/prompt_shares.py), through the real service with 2 workers:
the ids of a long chat prompt equal HF ``tokenizers``' ids of the rendered prompt whether the
peer worker takes its share, is stopped (SIGSTOP: alive, never answering) or killed (-9), and
the worker that got the prompt never waits on a peer for long (it takes the share back)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import zmq

from textproc.testing.corpus import fast_items
from tests.helpers.models import MODELS_DIR
from tests.helpers.service import Service, run
from textproc.client import TextClient
from textproc.protocol import (Stats, StatsRequest, TokenizeRequest, TokenizeResult,
                               WorkerOutFrame, unpack_ids)
from textproc.service.prompt_shares import PEER_COOLDOWN_S
from textproc.transport import FrameDecoder, encoder

pytestmark = pytest.mark.timeout(180)

PIECES = [text for _, text in fast_items() if text.strip()]


def _long_text(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    while sum(map(len, out)) < n_chars:
        out.append(rng.choice(PIECES)[:3000])
    return "".join(out)


class _Worker:
    """A DEALER to one worker's ROUTER, so a test chooses which worker gets a request."""

    def __init__(self, ctx: zmq.Context[Any], address: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.decoder: FrameDecoder[Any] = FrameDecoder(WorkerOutFrame, socket_name="test")
        self.n = 0

    def call(self, frame: Any, timeout_s: float = 60) -> Any:
        self.sock.send(encoder().encode(frame))
        assert self.sock.poll(int(timeout_s * 1000)), f"no answer to {frame!r:.80} in {timeout_s} s"
        return self.decoder.decode(self.sock.recv())

    def render(self, text: str) -> tuple[str, list[int]]:
        self.n += 1
        got = self.call(TokenizeRequest(f"t{self.n}", None, [{"role": "user", "content": text}]))
        assert isinstance(got, TokenizeResult), got
        return got.prompt or "", unpack_ids(got.token_ids)

    def counters(self) -> dict[str, int]:
        self.n += 1
        got = self.call(StatsRequest(f"s{self.n}"))
        assert isinstance(got, Stats), got
        return got.counters


def _service(root: Path, model: Path, workers: int = 2) -> Service:
    service = Service(root, model, workers=workers,
                      args=["--max-model-len", "4000000"]).start(timeout_s=120)
    # a worker that started before its peer bound retries the connect every RECONNECT_IVL_MS;
    # until then its shares stay its own (ZMQ_IMMEDIATE), which the counts below would see
    time.sleep(0.5)
    return service


def _settled(worker: _Worker, key: str, want: int) -> int:
    """The counter once it reaches ``want`` (a share is counted when its peer reads it), or
    after 5 s what it is then."""
    deadline = time.monotonic() + 5
    while (got := worker.counters()[key]) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


@pytest.fixture
def workers(tmp_path: Path, toy_model: Path) -> Iterator[tuple[Service, list[_Worker]]]:
    service = _service(tmp_path / "s", toy_model)
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        addresses = json.loads((service.runtime_dir / "endpoints.json").read_text())["endpoints"]["workers"]
        yield service, [_Worker(ctx, a) for a in addresses]
    finally:
        ctx.destroy(linger=0)
        service.stop()


def _reference(model: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model / "tokenizer.json"))


def _worker_pid(service: Service, i: int) -> int:
    return int(service.refresh_pids()["workers"][str(i)])


def test_long_prompts_are_shared_and_equal_the_reference(
        workers: tuple[Service, list[_Worker]], toy_model: Path) -> None:
    _, (w0, w1) = workers
    hf = _reference(toy_model)
    for seed, worker in ((1, w0), (2, w1), (3, w0)):
        prompt, ids = worker.render(_long_text(seed, 120_000))
        assert ids == hf.encode(prompt, add_special_tokens=False).ids, f"seed {seed}"
    c0, c1 = w0.counters(), w1.counters()
    # each long prompt is split, unless its peer was cooling down after a share it answered
    # late (the chunks taken back then; seen on a loaded box): never a stall, never wrong ids
    for counters, long_prompts in ((c0, 2), (c1, 1)):
        assert counters["split_prompts"] == long_prompts or (
            1 <= counters["split_prompts"] and counters["split_chunks_taken_back"] >= 1), counters
    # every share sent is served (after the connect, all of them are sent)
    assert c0["split_shares_sent"] + c1["split_shares_sent"] >= 1
    assert _settled(w1, "split_shares_served", c0["split_shares_sent"]) == c0["split_shares_sent"]
    assert _settled(w0, "split_shares_served", c1["split_shares_sent"]) == c1["split_shares_sent"]
    # a short prompt stays on its worker
    w0.render("hello there")
    assert w0.counters()["split_prompts"] == 2


def test_a_stopped_peer_costs_its_share_not_a_stall(
        workers: tuple[Service, list[_Worker]], toy_model: Path) -> None:
    service, (w0, w1) = workers
    hf = _reference(toy_model)
    w1.render("warm up")  # both workers up and connected
    pid = _worker_pid(service, 1)
    os.kill(pid, signal.SIGSTOP)  # alive, but never answers
    try:
        t0 = time.monotonic()
        prompt, ids = w0.render(_long_text(4, 120_000))
        done = time.monotonic()
        assert ids == hf.encode(prompt, add_special_tokens=False).ids
        counters = w0.counters()
        assert counters["split_shares_sent"] == 1 and counters["split_chunks_taken_back"] >= 1, counters
        text = _long_text(5, 120_000)
        in_cooldown = time.monotonic() - done < PEER_COOLDOWN_S * 0.5
        prompt, ids = w0.render(text)
        assert ids == hf.encode(prompt, add_special_tokens=False).ids
        if in_cooldown:  # (a loaded box may take longer than the cooldown to get here)
            assert w0.counters()["split_shares_sent"] == 1, "a share went to a peer cooling down"
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"long prompt with a stopped peer: {done - t0:.2f} s")
    # the peer answers its stale shares; they are dropped; after the cooldown it gets shares again
    time.sleep(PEER_COOLDOWN_S + 0.5)
    sent = w0.counters()["split_shares_sent"]
    prompt, ids = w0.render(_long_text(6, 120_000))
    assert ids == hf.encode(prompt, add_special_tokens=False).ids
    counters = w0.counters()
    assert counters["split_shares_sent"] == sent + 1 and counters["split_answers_late"] >= 1, counters


def test_a_killed_peer_is_covered_and_shares_resume_after_its_restart(
        workers: tuple[Service, list[_Worker]], toy_model: Path) -> None:
    service, (w0, w1) = workers
    hf = _reference(toy_model)
    w1.render("warm up")
    pid = _worker_pid(service, 1)
    os.kill(pid, signal.SIGKILL)
    prompt, ids = w0.render(_long_text(7, 120_000))
    assert ids == hf.encode(prompt, add_special_tokens=False).ids
    deadline = time.monotonic() + 60
    while _worker_pid(service, 1) == pid:
        assert time.monotonic() < deadline, f"worker 1 was not restarted:\n{service.log()}"
        time.sleep(0.05)
    w1.render("warm up")  # the new worker answers: it is bound and ready
    time.sleep(1.2)  # past any cooldown
    before = w0.counters()["split_shares_served"]
    for attempt in range(5):  # until the new worker's DEALER to worker 0 is connected
        prompt, ids = w1.render(_long_text(8 + attempt, 120_000))
        assert ids == hf.encode(prompt, add_special_tokens=False).ids
        if w1.counters()["split_shares_sent"]:
            break
        time.sleep(0.2)
    assert w1.counters()["split_shares_sent"] == 1
    assert _settled(w0, "split_shares_served", before + 1) == before + 1


def test_long_prompts_at_once_on_both_workers_all_equal_the_reference(
        workers: tuple[Service, list[_Worker]], toy_model: Path) -> None:
    """Both workers cut prompts and answer each other's shares at the same time (each waits
    on the other while the other waits on it); every prompt's ids are still exact."""
    service, _ = workers
    hf = _reference(toy_model)
    texts = [_long_text(20 + i, 60_000) for i in range(8)]

    async def main() -> list[tuple[str, list[int]]]:
        async with await TextClient.connect(service.runtime_dir, timeout_s=60) as client:
            return list(await asyncio.gather(*(
                client.render([{"role": "user", "content": t}]) for t in texts)))

    for i, (prompt, ids) in enumerate(run(main)):
        assert ids == hf.encode(prompt, add_special_tokens=False).ids, f"prompt {i}"


def test_three_workers_share_one_prompt_three_ways(tmp_path: Path, toy_model: Path) -> None:
    service = _service(tmp_path / "s3", toy_model, workers=3)
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        addresses = json.loads((service.runtime_dir / "endpoints.json").read_text())["endpoints"]["workers"]
        w = [_Worker(ctx, a) for a in addresses]
        for worker in w:
            worker.render("warm up")
        prompt, ids = w[2].render(_long_text(10, 150_000))
        assert ids == _reference(toy_model).encode(prompt, add_special_tokens=False).ids
        assert w[2].counters()["split_shares_sent"] == 2
        assert [_settled(w[i], "split_shares_served", 1) for i in (0, 1)] == [1, 1]
    finally:
        ctx.destroy(linger=0)
        service.stop()


@pytest.mark.skipif(not (MODELS_DIR / "qwen3" / "tokenizer.json").is_file(),
                    reason="real vocabulary qwen3 missing; build it with scripts/fetch_fixtures.py")
def test_a_long_qwen3_chat_prompt_across_two_workers_equals_tokenizers(tmp_path: Path) -> None:
    model = MODELS_DIR / "qwen3"
    hf = _reference(model)
    service = _service(tmp_path / "q", model)
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        address = json.loads((service.runtime_dir / "endpoints.json").read_text())["endpoints"]["workers"][0]
        w0 = _Worker(ctx, address)
        prompt, ids = w0.render(_long_text(9, 300_000))
        assert ids == hf.encode(prompt, add_special_tokens=False).ids
        assert w0.counters()["split_prompts"] == 1
    finally:
        ctx.destroy(linger=0)
        service.stop()
