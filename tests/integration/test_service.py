"""The service end to end: real processes over ipc with engine_stub in echo mode.

One service per module (nothing here kills processes). The reference for every streamed result
is the in-process text core on the same tokens: the echo "model" answers the last user message
re-encoded, then EOS, so the expected output is ``parse_output(truncate(decode(ids)))``.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest
import zmq

from tests.helpers.chat_cases import WEATHER_TOOL, chat_cases, collect, expected, make_case
from tests.helpers.service import Service, run
from textproc.core.chat.template import render_chat
from textproc.client import TextClient, TextEvent
from textproc.errors import InvalidInput, TemplateError, TextprocError
from textproc.core.parsing import merge_deltas
from textproc.protocol import EngineRequest, EngineStep, StepOutput, Submit, TokenizeRequest, pack_ids
from textproc.core.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(180)

MAX_MODEL_LEN = 4096
MAX_FRAME_BYTES = 1 << 20
@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, toy_model: Path) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("svc"), toy_model, workers=2,
                  args=["--max-model-len", str(MAX_MODEL_LEN),
                        "--max-frame-bytes", str(MAX_FRAME_BYTES), "--stub-arg=--step-ms=2"])
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def tok(toy_model: Path) -> Tokenizer:
    return Tokenizer.from_dir(toy_model)


# -- tests --------------------------------------------------------------------------------------

def test_1000_concurrent_chats_equal_the_in_process_core(service: Service, tok: Tokenizer) -> None:
    rng = random.Random(1234)
    cases = [make_case(i, rng) for i in range(1000)]

    async def main() -> list[list[TextEvent]]:
        async with await TextClient.connect(service.runtime_dir, timeout_s=30) as client:
            return await chat_cases(client, cases, "mix", 120)

    t0 = time.monotonic()
    results = run(main)
    elapsed = time.monotonic() - t0
    for i, (case, events) in enumerate(zip(cases, results)):
        want = expected(tok, case, f"mix-{i}")
        last = events[-1]
        label = f"request mix-{i} (seed 1234): {case}"
        assert all(e.finish_reason is None for e in events[:-1]), label
        assert merge_deltas(d for e in events for d in e.deltas) == want["merged"], label
        assert (last.finish_reason, last.stop) == (want["finish_reason"], want["stop"]), label
        assert last.usage is not None and last.usage.prompt_tokens == want["prompt_tokens"], label
        if want["stop"] is None:
            assert last.usage.completion_tokens == want["answer_tokens"], label
        else:
            assert 1 <= last.usage.completion_tokens <= want["answer_tokens"], label
    print(f"1000 concurrent chats in {elapsed:.1f} s")


def test_stop_string_mid_stream_aborts_in_the_engine(service: Service, tok: Tokenizer) -> None:
    tail = " filler" * 300
    content = "one two STOP three" + tail

    async def main() -> list[TextEvent]:
        async with await TextClient.connect(service.runtime_dir) as client:
            return await collect(client.chat([{"role": "user", "content": content}],
                                              stop=["STOP"], request_id="stop-abort"))

    events = run(main)
    assert events[-1].finish_reason == "stop" and events[-1].stop == "STOP"
    assert "".join(e.text for e in events) == "one two "
    generated = _stub_generated(service, "stop-abort")
    n_answer = len(tok.encode(content)) + 1
    assert generated < n_answer // 4, f"engine generated {generated} of {n_answer} tokens"


def test_client_cancel_aborts_in_the_engine(service: Service, tok: Tokenizer) -> None:
    content = "word " * 600

    async def main() -> int:
        async with await TextClient.connect(service.runtime_dir) as client:
            stream = client.chat([{"role": "user", "content": content}], request_id="cancel-me")
            got = 0
            async for event in stream:
                got += len(event.text)
                if got > 20:
                    break
            await stream.aclose()  # type: ignore[attr-defined]

            async def consume() -> None:  # a consumer task that gets cancelled mid-stream
                async for _ in client.chat([{"role": "user", "content": content}],
                                           request_id="cancel-task"):
                    pass

            task = asyncio.ensure_future(consume())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.5)
            stats = {s.role: s.counters for s in await client.stats()}
            return stats["detokenizer"]["requests_aborted"]

    aborted = run(main)
    assert aborted >= 2
    n_answer = len(tok.encode(content)) + 1
    for rid in ("cancel-me", "cancel-task"):
        generated = _stub_generated(service, rid)
        assert generated < n_answer // 2, f"{rid}: engine generated {generated} of {n_answer} tokens"


def test_n_choices_are_one_stream_with_an_index(service: Service, tok: Tokenizer) -> None:
    """TextClient.chat(n=3): events of the sub-requests <id>-<i> tagged with their index, each
    choice finishing on its own; closing the stream early aborts every choice still running."""
    text = "three choices, one prompt"

    async def main() -> tuple[dict[int, str], dict[int, Any], int]:
        async with await TextClient.connect(service.runtime_dir) as client:
            texts: dict[int, str] = {}
            usage: dict[int, Any] = {}
            async for event in client.chat([{"role": "user", "content": text}], n=3,
                                           request_id="three"):
                assert event.request_id == f"three-{event.index}"
                texts[event.index] = texts.get(event.index, "") + event.text
                if event.finish_reason is not None:
                    usage[event.index] = event.usage
            stream = client.chat([{"role": "user", "content": "word " * 600}], n=2,
                                 request_id="two-cut")
            async for event in stream:
                break
            await stream.aclose()  # type: ignore[attr-defined]
            with pytest.raises(InvalidInput, match="n=0"):
                async for _ in client.chat([{"role": "user", "content": "x"}], n=0):
                    pass
            await asyncio.sleep(0.5)
            stats = {s.role: s.counters for s in await client.stats()}
            return texts, usage, stats["detokenizer"]["requests_aborted"]

    texts, usage, aborted = run(main)
    assert texts == {0: text, 1: text, 2: text}
    assert len({u.prompt_tokens for u in usage.values()}) == 1 and len(usage) == 3
    assert aborted >= 2
    n_answer = len(tok.encode("word " * 600)) + 1
    for rid in ("two-cut-0", "two-cut-1"):
        generated = _stub_generated(service, rid)
        assert generated < n_answer // 2, f"{rid}: engine generated {generated} of {n_answer} tokens"


def test_sequential_requests_spread_over_the_workers(service: Service) -> None:
    """One request at a time is always a tie (nothing pending): requests without a conversation
    go round robin (exactly half each); distinct conversations spread by their key (a fixed
    hash of their first messages: 6 and 4 for these ten); a conversation's follow-up turns all
    go to one worker, the one holding its encoded segments."""
    async def main() -> tuple[list[int], list[int], list[int]]:
        async with await TextClient.connect(service.runtime_dir) as client:
            for i in range(12):
                await client.tokenize(f"text {i}")
            keyless = client.worker_requests()
            for i in range(10):
                await collect(client.chat([{"role": "user", "content": f"n {i}"}]))
            after_chats = client.worker_requests()
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
            for turn in range(6):
                await collect(client.chat(messages))
                messages += [{"role": "assistant", "content": "hi"},
                             {"role": "user", "content": f"turn {turn}"}]
            return keyless, after_chats, client.worker_requests()

    keyless, after_chats, final = run(main)
    assert keyless == [6, 6]
    chats = [b - a for a, b in zip(keyless, after_chats)]
    assert sorted(chats) == [4, 6]
    follow_ups = [b - a for a, b in zip(after_chats, final)]
    assert sorted(follow_ups) == [0, 6]


def test_bad_requests_get_their_error_and_disturb_nothing(service: Service) -> None:
    user = [{"role": "user", "content": "hello"}]
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"max_tokens": 0}, InvalidInput, r"max_tokens=0; allowed: >= 1"),
        ({"max_tokens": MAX_MODEL_LEN}, InvalidInput, r"maximum context length is 4096 tokens, but you requested"),
        ({"min_tokens": 5, "max_tokens": 2}, InvalidInput, r"min_tokens=5; allowed: 0..max_tokens"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         InvalidInput, r"unknown tool 'nope'"),
        ({"tool_choice": "required"}, InvalidInput, r"'required' needs at least one tool"),
        ({"tool_choice": "sometimes"}, InvalidInput, r"tool_choice 'sometimes' is not allowed"),
        ({"tools": [{"type": "function"}]}, InvalidInput, r"tools\[0\] must be"),
        ({"stop": ["ok", ""]}, InvalidInput, r"stop\[1\] is empty"),
        ({"stop": [f"s{i}" for i in range(65)]}, InvalidInput, r"stop has 65 strings; at most 64"),
        ({"stop": ["x" * 2000]}, InvalidInput, r"stop\[0\] has 2000 characters"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, TemplateError, r"unknown role robot"),
        ({"messages": []}, InvalidInput, r"messages must be a non-empty list"),
        ({"messages": [{"content": "no role"}]}, InvalidInput, r"messages\[0\]\.role"),
        ({"chat_template_kwargs": {"messages": 1}}, InvalidInput, r"chat_template_kwargs keys"),
        ({"stop_token_ids": [10**6]}, InvalidInput, r"outside the vocabulary"),
        ({"params": {"temperature": {"nested": 1}}}, InvalidInput, r"sampling\['temperature'\]"),
        ({"messages": [{"role": "user", "content": "x" * 20000}]}, InvalidInput,
         r"maximum context length is 4096 tokens, but the prompt has"),
    ]

    async def main() -> list[BaseException | None]:
        async with await TextClient.connect(service.runtime_dir) as client:
            async def one(kwargs: dict[str, Any]) -> BaseException | None:
                kwargs = dict(kwargs)
                messages = kwargs.pop("messages", user)
                try:
                    await collect(client.chat(messages, **kwargs))
                except Exception as e:
                    return e
                return None

            async def good() -> list[TextEvent]:
                return await collect(client.chat([{"role": "user", "content": "still fine"}]))

            results = await asyncio.gather(good(), *[one(c[0]) for c in cases], good())
            errors: list[BaseException | None] = list(results[1:-1])  # type: ignore[arg-type]
            for ok in (results[0], results[-1]):
                assert isinstance(ok, list) and ok[-1].finish_reason == "stop"
                assert "".join(e.text for e in ok) == "still fine"
            # completions, tokenize, detokenize errors
            for coro, pattern in [
                (collect(client.complete("")), r"encodes to no tokens"),
                (collect(client.complete([10**6])), r"outside the vocabulary"),
                (client.detokenize([10**7]), r"outside the vocabulary"),
                (client.tokenize(None), r"exactly one of text or messages"),
            ]:
                with pytest.raises(InvalidInput, match=pattern):
                    await coro
            # a duplicate request id across clients: the detokenizer refuses the second
            async with await TextClient.connect(service.runtime_dir) as other:
                first = client.chat([{"role": "user", "content": "word " * 200}], request_id="dup")
                await first.__anext__()
                with pytest.raises(InvalidInput, match="duplicate request_id 'dup'"):
                    await collect(other.chat(user, request_id="dup"))
                await first.aclose()  # type: ignore[attr-defined]
            return errors

    errors = run(main)
    for (kwargs, cls, pattern), err in zip(cases, errors):
        assert isinstance(err, cls), f"{kwargs}: got {err!r}"
        assert getattr(err, "status") == 400
        assert re.search(pattern, str(err)), f"{kwargs}: {err}"


def test_out_of_range_ids_from_python_callers_are_invalid_input(service: Service) -> None:
    """Ids past uint32 (or not ints) are the caller's error, named, not an OverflowError."""
    async def main() -> list[str]:
        async with await TextClient.connect(service.runtime_dir) as client:
            errors = []
            for call in (lambda: client.detokenize([1, 2**32]),
                         lambda: collect(client.complete([5, -1])),
                         lambda: client.detokenize([1, "x"])):  # type: ignore[list-item]
                with pytest.raises(InvalidInput) as info:
                    await call()
                errors.append(str(info.value))
            return errors

    errors = run(main)
    assert "token_ids must be token ids in 0..4294967295, got 4294967296" in errors[0]
    assert "prompt must be token ids" in errors[1] and "got -1" in errors[1]
    assert "got 'x'" in errors[2]


def test_tokenize_detokenize_and_completion(service: Service, tok: Tokenizer) -> None:
    text = "Hello 你好 😀 world"

    async def main() -> tuple[list[int], str, list[TextEvent], str]:
        async with await TextClient.connect(service.runtime_dir) as client:
            ids = await client.tokenize(text)
            back = await client.detokenize(ids + [tok.eos_token_id])
            events = await collect(client.complete(text, max_tokens=3))
            prompt, _ = await client.render([{"role": "user", "content": text}])
            return ids, back, events, prompt

    ids, back, events, prompt = run(main)
    assert ids == tok.encode(text)
    assert back == text
    assert events[-1].finish_reason == "length" and events[-1].usage is not None
    assert events[-1].usage.completion_tokens == 3
    assert "".join(e.text for e in events) == tok.decode(tok.encode(text)[:3])
    assert prompt == render_chat(tok.chat_template, [{"role": "user", "content": text}],
                                 add_generation_prompt=True, **tok.special_tokens_map)


def test_a_crashed_reader_task_fails_the_client_at_once(service: Service) -> None:
    """A reader that raises is its own error, right away: pending and later calls get it, not a
    later 'detokenizer has not answered' or a timeout."""

    async def main() -> tuple[float, str, str]:
        client = await TextClient.connect(service.runtime_dir)
        try:
            def broken(frame: object) -> None:
                raise RuntimeError("injected reader bug")

            client._readers.inflight.on_stats = broken  # type: ignore[union-attr, method-assign]
            t0 = time.monotonic()
            with pytest.raises(TextprocError) as first:
                await client.stats(timeout_s=30.0)
            waited = time.monotonic() - t0
            with pytest.raises(TextprocError) as later:
                await client.tokenize("hello")
            return waited, str(first.value), str(later.value)
        finally:
            await client.close()

    waited, first, later = run(main)
    assert waited < 10.0, f"the crash surfaced only after {waited:.1f} s"
    # whichever reader gets its Stats first (a worker's or the detokenizer's) is the one reported
    assert re.search(r"TextClient reader (worker-\d|detokenizer) stopped", first), first
    assert "injected reader bug" in first
    assert later == first


def test_malformed_frames_on_every_socket_are_counted_and_harmless(service: Service) -> None:
    info = json.loads((service.runtime_dir / "endpoints.json").read_text())
    ep = {**info["endpoints"], **info["endpoints"]["detokenizers"][0]}  # the one shard's four
    enc = msgspec.msgpack.encode
    garbage = [b"", b"\xff\xfe\x00garbage", enc(["ChatRequest"]), enc(["NoSuchTag", 1, 2]),
               enc(["ChatRequest", 1, 2, 3]), enc({"a": 1}), b"\x92" * 1000]
    huge = b"\x00" * (MAX_FRAME_BYTES + 1024)  # over ZMQ_MAXMSGSIZE: ZeroMQ drops the peer
    pids_before = dict(service.refresh_pids())
    ctx = zmq.Context()
    sockets: list[zmq.Socket[Any]] = []
    try:
        def sock(kind: int, address: str) -> zmq.Socket[Any]:
            s = ctx.socket(kind)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(address)
            sockets.append(s)
            return s

        for address in ep["workers"]:
            s = sock(zmq.DEALER, address)
            for g in garbage:
                s.send(g)
            s.send_multipart([b"extra", b"parts"])
            # right tag, wrong field types
            s.send(enc(["ChatRequest", "bad-types", "not a list", None, 5]))
        front = sock(zmq.DEALER, ep["detok_front"])
        for g in garbage:
            front.send(g)
        front.send_multipart([b"a", b"b"])
        detok_in = sock(zmq.PUSH, ep["detok_in"])
        for g in garbage + [enc(TokenizeRequest("wrong-frame-type"))]:
            detok_in.send(g)
        engine_out = sock(zmq.PUSH, ep["engine_out"])
        for g in garbage:
            engine_out.send(g)
        # well-formed, but for requests nobody submitted: buffered briefly, then dropped
        engine_out.send(msgspec.msgpack.encode(EngineStep(1, [StepOutput("ghost", [1, 2])])))
        control = sock(zmq.PUSH, ep["control"])
        for g in garbage:
            control.send(g)
        for address in [*ep["workers"], ep["detok_front"]]:
            sock(zmq.DEALER, address).send(huge)
        for address in [ep["detok_in"], ep["engine_out"], ep["control"]]:
            sock(zmq.PUSH, address).send(huge)
        # a valid Submit for a client that does not exist: the output is unroutable -> aborted
        bogus = Submit("bogus-client-req", b"nobody", 1, 5,
                       msgspec.msgpack.encode(EngineRequest("bogus-client-req", pack_ids([1]), 5)))
        detok_in.send(msgspec.msgpack.encode(Submit("x", b"c", 1, 5, b"\x00garbage")))
        detok_in.send(msgspec.msgpack.encode(bogus))
        time.sleep(1.0)
    finally:
        for s in sockets:
            s.close(linger=0)
        ctx.term()

    async def main() -> tuple[list[TextEvent], dict[str, dict[str, int]]]:
        async with await TextClient.connect(service.runtime_dir) as client:
            events = await collect(client.chat([{"role": "user", "content": "after garbage"}]))
            stats = {f"{s.role}-{s.index}": s.counters for s in await client.stats()}
            return events, stats

    events, stats = run(main)
    assert "".join(e.text for e in events) == "after garbage"
    n_garbage = len(garbage)
    for i in range(service.workers):
        assert stats[f"worker-{i}"][f"frames_malformed.worker-{i}"] >= n_garbage + 2, stats
    detok = stats["detokenizer-0"]
    assert detok["frames_malformed.detok-front"] >= n_garbage + 1, detok
    assert detok["frames_malformed.detok-in"] >= n_garbage + 2, detok
    assert detok["frames_malformed.engine-out"] >= n_garbage, detok
    # the Submit for a client that never connected: its output was unroutable -> aborted
    assert detok["outputs_unroutable"] >= 1 and detok["requests_aborted"] >= 1, detok
    assert dict(service.refresh_pids()) == pids_before, "a process restarted"
    log = service.log(tail=None)
    for name in ["worker-0", "detok-front", "detok-in", "engine-out", "control"]:
        assert f"malformed frame #1 on {name}" in log, f"no log line for {name}"


def _stub_generated(service: Service, request_id: str, *, wait_s: float = 5.0) -> int:
    """Tokens the stub generated for ``request_id``, once its --stats-file lists it as aborted."""
    deadline = time.monotonic() + wait_s
    stats: Any = None
    while True:
        try:
            stats = service.stub_stats()
            entry = stats["requests"].get(request_id)
            if entry is not None and request_id in stats["aborted"]:
                return int(entry["generated"])
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"stub stats do not show {request_id!r} aborted: "
                                 f"{None if stats is None else stats.get('requests', {}).get(request_id)}")
        time.sleep(0.1)
