"""TextClient's generation loop without sockets: how soon a consumer gets an output, and the
timeout for a worker that never answers Accepted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from textproc.client.inflight import InFlight
from textproc.client.textclient import TextClient
from textproc.errors import TextprocError
from textproc.protocol import RequestOutput

pytestmark = pytest.mark.timeout(30)


class _Sink:
    """A worker socket that takes every frame and never answers."""

    async def send(self, data: bytes) -> None:
        return None


def _client() -> TextClient:
    client = TextClient({}, Path("."))
    client._workers = [_Sink()]  # type: ignore[list-item]
    client._inflight = InFlight(1)
    return client


def test_an_output_reaches_a_consumer_still_waiting_for_accepted_in_one_loop_round() -> None:
    """Before: the consumer waited in asyncio.wait_for while no Accepted had come, which woke it
    one loop round after the output: behind every stream the same Outputs frame woke (TTFT)."""

    async def main() -> None:
        client = _client()
        got: list[Any] = []

        async def consume() -> None:
            async for event in client.complete("hi", request_id="r", max_tokens=4):
                got.append(event)

        task = asyncio.ensure_future(consume())
        for _ in range(5):
            await asyncio.sleep(0)
        stream = client._inflight.streams["r"]
        assert stream.pending_at_worker and stream.waiter is not None
        stream.items.append(RequestOutput("r", [{"content": "a"}], "length", None, 1, 1))
        stream.wake()
        await asyncio.sleep(0)  # one round: the consumer has run
        assert [e.text for e in got] == ["a"]
        await task

    asyncio.run(main())


def test_a_worker_that_never_answers_fails_the_stream_with_a_timeout() -> None:
    async def main() -> None:
        client = _client()
        with pytest.raises(TextprocError, match=r"worker 0 .* did not answer") as err:
            async for _ in client.complete("hi", request_id="r", max_tokens=4, timeout_s=0.2):
                pass
        assert getattr(err.value, "kind") == "timeout"
        assert not client._inflight.streams  # nothing left behind

    asyncio.run(main())
