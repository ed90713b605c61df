"""Fuzz every frame decoder and what the process loops do with a decoded frame.

Random bytes, random MessagePack values, valid frames with fields replaced by random values,
wrong or swapped tags, truncated and oversized frames go into ``textproc.transport.FrameDecoder``
for each socket's union (``textproc.protocol``), then, like the loops in ``workers.py`` and
``detokenizer_process.py`` do, into ``RequestBuilder`` (worker) and the ``RequestTable`` state
machine. Allowed: ``decode`` returns a struct of the socket's union, or None with the socket's
``malformed`` counter up by exactly one; the builder raises only TextprocError (the worker turns
it into a Failure); the detokenizer core raises nothing and every frame it queues encodes.
``EngineLink`` gets garbage on a real ipc PULL socket: it counts ``malformed_frames`` and raises
nothing, and the valid requests and aborts around the garbage come out in order.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_frames.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from textproc.options import OutputOptions, ParseOptions, SamplingOptions
from textproc.config import ServiceConfig
from textproc.service.request_table import RequestTable
from textproc.engine import EngineLink
from textproc.errors import InvalidInput, ProtocolError, TextprocError
from textproc.protocol import (
    Abort,
    Accepted,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EngineAbort,
    EngineHello,
    EngineInFrame,
    EngineOutFrame,
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    EventFrame,
    Failure,
    FrontInFrame,
    FrontOutFrame,
    Hello,
    Outputs,
    ProcessDied,
    Query,
    Ready,
    RequestOutput,
    StatsRequest,
    StepOutput,
    Submit,
    TokenizeRequest,
    TokenizeResult,
    Unknown,
    Welcome,
    WorkerInFrame,
    WorkerOutFrame,
    pack_ids,
    unpack_ids,
)
from tests.helpers.engine_peer import EnginePeer
from textproc.core.tokenizer import Tokenizer
from textproc.transport import FrameDecoder, encoder
from textproc.service.request_builder import RequestBuilder

pytestmark = pytest.mark.timeout(120)

ENC = msgspec.msgpack.Encoder()
_INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)

msgpack_scalars = st.one_of(
    st.none(), st.booleans(), _INT64, st.integers(-3, 700), st.floats(), st.text(max_size=10),
    st.binary(max_size=12), st.sampled_from(["", "user", "assistant", "tool", "system", "stop",
                                             "length", "abort", "error", "r1", "<|im_end|>"]),
)
msgpack_values: st.SearchStrategy[Any] = st.recursive(
    msgpack_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(
                                ["role", "content", "tool_calls", "function", "name", "type",
                                 "arguments", "tools"])), inner, max_size=4)),
    max_leaves=10,
)

_TOK_IDS = pack_ids([5, 6, 7])
_ENGINE_REQ = ENC.encode(EngineRequest("r1", _TOK_IDS, 8, [1]))
_MSGS = [{"role": "user", "content": "hi there"}]
_TOOLS = [{"type": "function", "function": {"name": "get", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]

# one or more valid examples per frame type (the seeds the mutations start from)
EXAMPLES: dict[str, list[Any]] = {
    "worker": [
        ChatRequest("r1", _MSGS),
        ChatRequest("r2", _MSGS, _TOOLS, "required", {"enable_thinking": False}, True, False,
                    None, None, SamplingOptions(max_tokens=16, min_tokens=1, stop_token_ids=[3],
                                                params={"temperature": 0.5}),
                    OutputOptions(stop=["\n\n"], include_stop=True)),
        ChatRequest("r3", _MSGS, _TOOLS, {"type": "function", "function": {"name": "get"}}),
        CompletionRequest("r4", "Once upon", None, sampling=SamplingOptions(max_tokens=8),
                          output=OutputOptions(stop=["."])),
        CompletionRequest("r5", "", _TOK_IDS, sampling=SamplingOptions(max_tokens=4,
                                                                       params={"seed": 1}),
                          output=OutputOptions(skip_special_tokens=False)),
        TokenizeRequest("r6", "hello"),
        TokenizeRequest("r7", None, _MSGS, _TOOLS),
        DetokenizeRequest("r8", _TOK_IDS),
        StatsRequest("r9"),
    ],
    "submit": [
        Submit("r1", b"client", 3, 8, _ENGINE_REQ),
        Submit("r1", b"client", 3, 8, _ENGINE_REQ, 1,
               OutputOptions(stop=["stop"], include_stop=True, skip_special_tokens=False),
               ParseOptions(reasoning=True, tools=True, starts_in_reasoning=True)),
    ],
    "engine_out": [
        EngineHello("inst-1"),
        EngineStep(0, [StepOutput("r1", [5, 6]), StepOutput("r1", [7], "stop")]),
        EngineStep(1, [StepOutput("r2", [], "length"), StepOutput("rX", [1, 2, 3])]),
        EngineStepPacked(2, ["r1", "r2"], pack_ids([5, 6])),
        EngineStepPacked(3, ["r1", "r2", "r3"], pack_ids([5, 6, 7, 8]), pack_ids([1, 0, 3]),
                         {0: "stop", 2: "length"}),
    ],
    "front_in": [Hello(), Abort(["r1", "r2"]), Query(["r1"]), StatsRequest("s")],
    "engine_in": [EngineRequest("r1", _TOK_IDS, 8, [1], {"temperature": 0.0}, "a+", 1, True),
                  EngineAbort(["r1"])],
    "worker_out": [Accepted("r1", 3), Failure("r1", "invalid_input", "bad"),
                   TokenizeResult("r1", _TOK_IDS, "p")],
    "front_out": [Welcome("i"), Unknown(["r1"]),
                  Outputs([RequestOutput("r1", [{"content": "x"}], "stop", None, 3, 1)])],
    "events": [Ready("worker", 0, 123), ProcessDied("worker", 1, -9, 5)],
}
UNIONS: dict[str, Any] = {
    "worker": WorkerInFrame, "submit": Submit, "engine_out": EngineOutFrame,
    "front_in": FrontInFrame, "engine_in": EngineInFrame, "worker_out": WorkerOutFrame,
    "front_out": FrontOutFrame, "events": EventFrame,
}
ALL_TAGS = sorted({type(f).__name__ for frames in EXAMPLES.values() for f in frames}
                  | {"StepOutput", "RequestOutput", "Stats", "DetokenizeResult", "Nope", ""})


def _mutate_at(value: Any, data: st.DataObject, depth: int = 0) -> Any:
    """Replace one node somewhere inside ``value`` (a list/dict tree) with a random value."""
    if isinstance(value, list) and value and data.draw(st.integers(0, 3)) > 0 and depth < 6:
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate_at(value[i], data, depth + 1), *value[i + 1:]]
    if isinstance(value, dict) and value and data.draw(st.integers(0, 3)) > 0 and depth < 6:
        key = data.draw(st.sampled_from(sorted(value, key=repr)))
        return {**value, key: _mutate_at(value[key], data, depth + 1)}
    return data.draw(msgpack_values)


@st.composite
def frame_bytes(draw: st.DrawFn, socket: str) -> bytes:
    """Bytes for ``socket``: mostly damaged valid frames, some pure noise."""
    data = draw(st.data())
    how = draw(st.sampled_from(["mutate", "mutate", "mutate", "retag", "truncate", "extend",
                                "noise", "value", "other_socket"]))
    if how == "noise":
        return draw(st.binary(max_size=64))
    if how == "value":
        return ENC.encode(draw(msgpack_values))
    pool = EXAMPLES[socket] if how != "other_socket" else [
        f for frames in EXAMPLES.values() for f in frames]
    seed = msgspec.to_builtins(draw(st.sampled_from(pool)))
    if how == "mutate":
        for _ in range(draw(st.integers(1, 3))):
            seed = _mutate_at(seed, data)
    elif how == "retag":
        seed = [draw(st.sampled_from(ALL_TAGS)), *seed[1:]]
    elif how == "extend":
        seed = [*seed, *draw(st.lists(msgpack_values, min_size=1, max_size=3))]
    raw = ENC.encode(seed)
    if how == "truncate":
        raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    return raw


def _decode_counted(decoder: FrameDecoder[Any], raw: bytes, union: Any) -> Any:
    before = decoder.malformed
    frame = decoder.decode(raw, peer="fuzz")
    if frame is None:
        assert decoder.malformed == before + 1
    else:
        assert decoder.malformed == before
        members = union.__args__ if hasattr(union, "__args__") else (union,)
        assert isinstance(frame, members), frame
        ENC.encode(frame)  # a decoded frame always encodes again
    return frame


@pytest.fixture(autouse=True)
def _quiet_transport_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="textproc")


@given(data=st.data())
def test_every_decoder_counts_garbage(data: st.DataObject) -> None:
    socket = data.draw(st.sampled_from(sorted(UNIONS)))
    decoder: FrameDecoder[Any] = FrameDecoder(UNIONS[socket], socket_name=socket)
    for raw in data.draw(st.lists(frame_bytes(socket), min_size=1, max_size=3)):
        _decode_counted(decoder, raw, UNIONS[socket])
    assert decoder.received >= 1


@given(st.binary(max_size=64))
def test_unpack_ids_only_value_error(raw: bytes) -> None:
    try:
        ids = unpack_ids(raw)
    except ValueError:
        assert len(raw) % 4
        return
    assert pack_ids(ids) == raw


# -- what the loops do with decoded frames ---------------------------------------------------

@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, ServiceConfig]:
    from tests.helpers.service import build_toy_model

    path = build_toy_model(tmp_path_factory.mktemp("fuzz-toy"))
    config = ServiceConfig(model_dir=str(path), max_model_len=256, max_stops=8,
                           max_stop_chars=32, max_live_requests=50, max_early_outputs=20)
    return Tokenizer.from_dir(path), config


def _serve_one(builder: RequestBuilder, frame: Any) -> Any:
    """The worker loop's dispatch (workers._serve) minus sockets; only TextprocError may escape."""
    match frame:
        case ChatRequest():
            return builder.chat(frame, b"client")[0]
        case CompletionRequest():
            return builder.completion(frame, b"client")[0]
        case TokenizeRequest():
            return builder.tokenize(frame)
        case DetokenizeRequest():
            return builder.detokenize(frame)
    return None


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raws=st.lists(frame_bytes("worker"), min_size=1, max_size=4))
def test_worker_requests_fail_with_textproc_errors(toy: tuple[Tokenizer, ServiceConfig],
                                                   raws: list[bytes]) -> None:
    tok, config = toy
    builder = RequestBuilder(tok, config)
    decoder: FrameDecoder[Any] = FrameDecoder(WorkerInFrame, socket_name="worker-0")
    for raw in raws:
        frame = _decode_counted(decoder, raw, WorkerInFrame)
        if frame is None:
            continue
        try:
            reply = _serve_one(builder, frame)
        except TextprocError as e:
            assert str(e)
            encoder().encode(Failure(frame.request_id, "invalid_input", str(e), 400))
            continue
        if isinstance(reply, Submit):
            inner = msgspec.msgpack.decode(reply.engine_request, type=EngineRequest)
            assert inner.request_id == reply.request_id == frame.request_id
            assert 1 <= reply.prompt_tokens < config.max_model_len
            assert reply.prompt_tokens + inner.max_tokens <= config.max_model_len
            assert all(0 <= t < tok.vocab_size for t in unpack_ids(inner.prompt_token_ids))
        if reply is not None:
            encoder().encode(reply)


def _loop_submit(core: RequestTable, decoder: FrameDecoder[Any], raw: bytes) -> None:
    """detokenizer_process._Loop._drain_submits for one frame."""
    submit = decoder.decode(raw, peer="worker")
    if submit is None:
        return
    try:
        inner = msgspec.msgpack.decode(submit.engine_request, type=EngineRequest)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    if inner.request_id != submit.request_id:
        return
    forwarded = core.on_submit(submit)
    assert forwarded is None or forwarded == submit.engine_request


@st.composite
def _detok_traffic(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    """An interleaving of Submits (valid and damaged), engine frames and client frames."""
    items: list[tuple[str, bytes]] = []
    for _ in range(draw(st.integers(1, 8))):
        socket = draw(st.sampled_from(["submit", "engine_out", "engine_out", "front_in"]))
        if draw(st.booleans()):
            items.append((socket, draw(frame_bytes(socket))))
        elif socket == "submit":
            rid = draw(st.sampled_from(["r1", "r2", "r3"]))
            stops = draw(st.lists(st.one_of(st.text(max_size=4), st.sampled_from(["\n", "lo"])), max_size=3))
            items.append((socket, ENC.encode(Submit(
                rid, draw(st.sampled_from([b"c1", b"c2"])), 3, 8,
                ENC.encode(EngineRequest(rid, _TOK_IDS, 8)), draw(st.integers(0, 3)),
                OutputOptions(stop=stops, include_stop=draw(st.booleans()),
                              skip_special_tokens=draw(st.booleans())),
                ParseOptions(reasoning=draw(st.booleans()), tools=draw(st.booleans()),
                             starts_in_reasoning=draw(st.booleans()))))))
        elif socket == "engine_out":
            outs = [StepOutput(draw(st.sampled_from(["r1", "r2", "r3", "zz"])),
                               draw(st.lists(st.one_of(st.integers(0, 700), _INT64.filter(
                                   lambda v: v < 2**63)), max_size=5)),
                               draw(st.sampled_from([None, None, "stop", "length", "abort",
                                                     "error", "bogus"])))
                    for _ in range(draw(st.integers(0, 3)))]
            kind = draw(st.integers(0, 5))
            frame: Any
            if kind == 0:
                frame = EngineHello(draw(st.sampled_from(["i1", "i2"])))
            elif kind <= 2:
                frame = EngineStep(draw(st.integers(0, 9)), outs)
            else:  # the packed form of the same step, sometimes with columns that do not fit
                all_ids = [i for o in outs for i in o.token_ids if 0 <= i < 2**32]
                counts = [len([i for i in o.token_ids if 0 <= i < 2**32]) for o in outs]
                if draw(st.integers(0, 4)) == 0:
                    counts = draw(st.lists(st.integers(0, 5), max_size=4))
                finished = {i: o.finish_reason for i, o in enumerate(outs) if o.finish_reason}
                if draw(st.integers(0, 4)) == 0:
                    finished[draw(st.integers(-2, 6))] = "stop"
                frame = EngineStepPacked(draw(st.integers(0, 9)), [o.request_id for o in outs],
                                         pack_ids(all_ids), pack_ids(counts), finished)
            items.append((socket, ENC.encode(frame)))
        else:
            items.append((socket, ENC.encode(Abort(draw(st.lists(st.sampled_from(["r1", "r2", "x"]),
                                                                 max_size=3))))))
    return items


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(_detok_traffic())
def test_detokenizer_core_survives_any_traffic(toy: tuple[Tokenizer, ServiceConfig],
                                               traffic: list[tuple[str, bytes]]) -> None:
    tok, config = toy
    core = RequestTable(tok, config)
    decoders = {s: FrameDecoder(UNIONS[s], socket_name=s) for s in ("submit", "engine_out", "front_in")}
    for socket, raw in traffic:
        if socket == "submit":
            _loop_submit(core, decoders[socket], raw)
        elif socket == "engine_out":
            frame = decoders[socket].decode(raw, peer="engine")
            if isinstance(frame, (EngineStep, EngineStepPacked)):
                try:  # the loop counts a packed step whose columns do not fit as malformed
                    core.on_step(frame)
                except ProtocolError as e:
                    assert isinstance(frame, EngineStepPacked) and str(e)
            elif isinstance(frame, EngineHello):
                core.on_hello(frame)
        else:
            frame = decoders[socket].decode(raw, peer="c1")
            if isinstance(frame, Abort):
                core.on_abort(b"c1", frame.request_ids)
            elif isinstance(frame, Query):
                core.unknown(frame.request_ids)
        # the loop's flush: every queued frame encodes, every error output says why
        for client_id, items in core.outbox.items():
            encoder().encode(Outputs(items))
            for item in items:
                if item.finish_reason == "error":
                    assert item.error and item.error_kind, item
        encoder().encode(EngineAbort(core.engine_aborts))
        core.outbox, core.engine_aborts = {}, []
        core.expire_early(time.monotonic() + 3600)
    assert len(core.live) <= config.max_live_requests


# -- EngineLink on real sockets ----------------------------------------------------------------

@pytest.fixture(scope="module")
def link(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EnginePeer, EngineLink]]:
    side = EnginePeer(tmp_path_factory.mktemp("link"))
    lk = EngineLink.connect(side.engine_in, side.engine_out, max_frame_bytes=1 << 16)
    assert side.pull.poll(5000)
    msgspec.msgpack.decode(side.pull.recv(), type=EngineOutFrame)  # EngineHello
    yield side, lk
    lk.close()
    side.close()


def _poll_until(lk: EngineLink, want_requests: int, want_aborts: int, want_malformed: int
                ) -> tuple[list[str], list[str]]:
    got_req: list[str] = []
    got_abort: list[str] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        got_req += [r.request_id for r in lk.poll_requests()]
        got_abort += lk.poll_aborts()
        if len(got_req) >= want_requests and len(got_abort) >= want_aborts and \
                lk.malformed_frames >= want_malformed:
            break
        lk.wait(0.02)
    return got_req, got_abort


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raws=st.lists(frame_bytes("engine_in"), min_size=1, max_size=4))
def test_engine_link_counts_garbage_and_keeps_order(link: tuple[EnginePeer, EngineLink],
                                                    raws: list[bytes]) -> None:
    side, lk = link
    lk.poll_requests(), lk.poll_aborts()
    strict = msgspec.msgpack.Decoder(EngineInFrame)
    want_req: list[str] = []
    want_abort: list[str] = []
    bad = 0
    before = lk.malformed_frames
    for i, raw in enumerate(raws):
        # a valid request before each piece of garbage, to check nothing is lost or reordered
        ok = EngineRequest(f"ok-{i}", _TOK_IDS, 4)
        side.push.send(ENC.encode(ok))
        want_req.append(ok.request_id)
        side.push.send(raw)
        try:
            frame = strict.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            bad += 1
            continue
        if isinstance(frame, EngineAbort):
            want_abort += frame.request_ids
        elif frame.request_id and frame.prompt_token_ids and len(frame.prompt_token_ids) % 4 == 0 \
                and frame.max_tokens >= 1 and frame.min_tokens >= 0 and min(frame.stop_token_ids, default=0) >= 0:
            want_req.append(frame.request_id)
        else:
            bad += 1  # decodes but breaks a rule: rejected with an error step, counted
    got_req, got_abort = _poll_until(lk, len(want_req), len(want_abort), before + bad)
    # requests aborted in the same drain are dropped from the pending queue, never reordered
    gone = set(want_abort)
    assert [r for r in got_req if r not in gone] == [r for r in want_req if r not in gone]
    assert got_abort == want_abort
    assert lk.malformed_frames - before == bad
    while side.pull.poll(0):  # error steps for rejected requests decode as EngineStep
        frame = msgspec.msgpack.decode(side.pull.recv(), type=EngineOutFrame)
        assert isinstance(frame, (EngineStep, EngineStepPacked, EngineHello))


def test_engine_link_oversized_frame_is_counted(link: tuple[EnginePeer, EngineLink]) -> None:
    side, lk = link
    before = lk.malformed_frames
    side.push.send(ENC.encode(EngineRequest("big", pack_ids(list(range(40_000))), 4)))  # 160 KB
    side.push.send(ENC.encode(EngineRequest("after", _TOK_IDS, 4)))
    got, _ = _poll_until(lk, 1, 0, before + 1)
    assert got == ["after"]
    assert lk.malformed_frames == before + 1


# -- regressions: a 2 KB frame nested 2000 deep raised RecursionError out of the decoders (found
#    here; fixed in transport.FrameDecoder by SERVICE and in EngineLink by ENGINE) ------------------

def _deep_sampling_frame(tag: str, depth: int) -> bytes:
    """A frame whose last field (dict[str, Any]: ChatRequest's ``chat_template_kwargs``,
    EngineRequest's ``sampling``) holds a list nested ``depth`` deep."""
    nested = b"\x91" * depth + b"\xc0"
    if tag == "ChatRequest":
        head = ENC.encode(["ChatRequest", "r1", _MSGS, None, "auto"])
        return b"\x96" + head[1:] + b"\x81\xa1k" + nested
    head = ENC.encode(["EngineRequest", "r1", _TOK_IDS, 4, []])
    return b"\x96" + head[1:] + b"\x81\xa1k" + nested


def test_frame_decoder_deep_nesting_is_malformed() -> None:
    decoder: FrameDecoder[Any] = FrameDecoder(WorkerInFrame, socket_name="worker-0")
    assert decoder.decode(_deep_sampling_frame("ChatRequest", 2000)) is None
    assert decoder.malformed == 1


def test_engine_link_deep_nesting_is_malformed(link: tuple[EnginePeer, EngineLink]) -> None:
    side, lk = link
    before = lk.malformed_frames
    side.push.send(_deep_sampling_frame("EngineRequest", 2000))
    side.push.send(ENC.encode(EngineRequest("after-deep", _TOK_IDS, 4)))
    got, _ = _poll_until(lk, 1, 0, before + 1)
    assert got == ["after-deep"] and lk.malformed_frames == before + 1


def test_deep_frame_is_what_the_regression_tests_think() -> None:
    # a shallow version of the same bytes decodes, so those tests are about the depth alone
    assert isinstance(msgspec.msgpack.decode(_deep_sampling_frame("ChatRequest", 3), type=WorkerInFrame),
                      ChatRequest)
    assert isinstance(msgspec.msgpack.decode(_deep_sampling_frame("EngineRequest", 3), type=EngineInFrame),
                      EngineRequest)


def test_invalid_input_is_a_textproc_error() -> None:
    assert issubclass(InvalidInput, TextprocError)


# -- structured requests: every field of a well-formed frame random (reaches render/encode/limits)

_field_text = st.one_of(st.text(max_size=10), st.sampled_from(["", "<|im_end|>", "<think>", "\n\n", "x" * 40]))
_msg = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "", "bogus"]),
                           "content": st.one_of(_field_text, msgpack_values)},
                          optional={"tool_calls": st.one_of(msgpack_values, st.just(
                              [{"type": "function", "function": {"name": "get", "arguments": '{"q": "x"}'}}])),
                              "reasoning_content": _field_text}),
    st.dictionaries(st.text(max_size=6), msgpack_values, max_size=3),
)
_tool = st.one_of(
    st.just(_TOOLS[0]),
    st.fixed_dictionaries({"type": st.sampled_from(["function", "x"]), "function": st.fixed_dictionaries(
        {"name": _field_text}, optional={"parameters": msgpack_values, "description": _field_text})}),
    st.dictionaries(st.text(max_size=5), msgpack_values, max_size=2),
)
_ints = st.one_of(st.integers(-3, 300), st.integers(-(2**63), 2**63 - 1))


def _mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` about 5 times in 6, so most requests get past the first check."""
    return st.integers(0, 5).flatmap(lambda k: invalid if k == 0 else valid)


_good_msgs = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                              "content": st.text(max_size=20)}), min_size=1, max_size=3)


@st.composite
def _chat_requests(draw: st.DrawFn) -> ChatRequest:
    tools = draw(_mostly(st.one_of(st.none(), st.just(_TOOLS)), st.lists(_tool, max_size=2)))
    return ChatRequest(
        draw(_mostly(st.just("r1"), st.one_of(st.text(max_size=4), st.just("x" * 300)))),
        draw(_mostly(_good_msgs, st.lists(_msg, max_size=4))),
        tools,
        draw(_mostly(st.sampled_from(["none", "auto", "required"] + (
            [{"type": "function", "function": {"name": "get"}}] if tools == _TOOLS else [])),
            st.one_of(st.just("bogus"), st.dictionaries(st.text(max_size=5), msgpack_values, max_size=2)))),
        draw(_mostly(st.sampled_from([{}, {"enable_thinking": False}, {"enable_thinking": True}]),
                     st.dictionaries(st.one_of(st.sampled_from(["messages", "tools", "1x", "a b"]),
                                               st.text(max_size=5)), msgpack_values, max_size=2))),
        draw(_mostly(st.just(True), st.booleans())),
        draw(_mostly(st.just(False), st.booleans())),
        sampling=draw(_sampling()),
        output=draw(_output()),
    )


@st.composite
def _sampling(draw: st.DrawFn) -> SamplingOptions:
    return SamplingOptions(
        max_tokens=draw(_mostly(st.one_of(st.none(), st.integers(1, 100)), _ints)),
        min_tokens=draw(_mostly(st.integers(0, 2), _ints)),
        stop_token_ids=draw(_mostly(st.lists(st.integers(0, 50), max_size=2),
                                    st.lists(_ints, max_size=3))),
        ignore_eos=draw(st.booleans()),
        params=draw(_mostly(st.sampled_from([{}, {"temperature": 0.7, "seed": 3}]),
                            st.dictionaries(st.text(max_size=6), msgpack_values, max_size=3))))


@st.composite
def _output(draw: st.DrawFn) -> OutputOptions:
    return OutputOptions(
        stop=draw(_mostly(st.lists(st.text(min_size=1, max_size=6), max_size=3),
                          st.lists(_field_text, max_size=10))),
        include_stop=draw(st.booleans()), skip_special_tokens=draw(st.booleans()))


@st.composite
def _completion_requests(draw: st.DrawFn) -> CompletionRequest:
    use_ids = draw(st.booleans())
    ids = draw(_mostly(st.lists(st.integers(0, 500), min_size=1, max_size=6).map(pack_ids),
                       st.one_of(st.binary(max_size=24), st.lists(st.integers(0, 2**32 - 1), max_size=6).map(pack_ids)))
               ) if use_ids else None
    return CompletionRequest(
        draw(_mostly(st.just("r1"), st.text(max_size=4))),
        "" if use_ids and draw(st.integers(0, 5)) else draw(_mostly(st.text(min_size=1, max_size=30),
                                                                   st.one_of(_field_text, st.just("word " * 300)))),
        ids,
        draw(st.booleans()),
        sampling=draw(_sampling()),
        output=draw(_output()),
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(_chat_requests(), _completion_requests()))
def test_structured_requests_fail_with_textproc_errors(toy: tuple[Tokenizer, ServiceConfig],
                                                       req: ChatRequest | CompletionRequest) -> None:
    tok, config = toy
    # what a client can send is what survives the wire: encode, then decode like the worker
    raw = ENC.encode(req)
    frame = _decode_counted(FrameDecoder(WorkerInFrame, socket_name="worker-0"), raw, WorkerInFrame)
    if frame is None:
        return
    try:
        submit = _serve_one(RequestBuilder(tok, config), frame)
    except TextprocError as e:
        assert str(e)
        event(f"refused: {type(e).__name__}")
        return
    event("accepted")
    inner = msgspec.msgpack.decode(submit.engine_request, type=EngineRequest)
    assert 1 <= submit.prompt_tokens and submit.prompt_tokens + inner.max_tokens <= config.max_model_len
    assert 0 <= inner.min_tokens <= inner.max_tokens
    assert all(0 <= t < tok.vocab_size for t in inner.stop_token_ids)
    assert len(submit.output.stop) <= config.max_stops
    if inner.constraint is not None:
        import regex

        regex.compile(inner.constraint)


def test_invalid_utf8_and_surrogates_in_frames_are_counted() -> None:
    decoder: FrameDecoder[Any] = FrameDecoder(WorkerInFrame, socket_name="worker-0")
    good = ENC.encode(ChatRequest("r1", [{"role": "user", "content": "HELLO"}]))
    assert isinstance(decoder.decode(good), ChatRequest)
    for bad in (b"HE\xff\xfeO", b"HE\xed\xa0\x80", b"\xc0\x80LLO", b"HELL\xe2"):
        assert decoder.decode(good.replace(b"HELLO", bad)) is None
    assert decoder.malformed == 4 and decoder.received == 5
