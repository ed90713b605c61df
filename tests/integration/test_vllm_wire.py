"""textproc's frames of vLLM's engine-core wire (textproc.vllm_front.wire), read and written by
vLLM's own classes in the engine's environment: an ADD decodes into the ``EngineCoreRequest``
and ``SamplingParams`` vLLM's own input processor would send, the handshake reply into
``EngineHandshakeMetadata``, and textproc decodes what vLLM's encoder writes (outputs with
logprobs inline and in frames of their own, ready messages). A vLLM upgrade that moves a field
fails here. Also: vLLM finds textproc's plugin (its entry point) and the plugin adds the index
utility calls to ``EngineCore``."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.helpers.models import REPO_ROOT
from tests.helpers.real_engine import VLLM_PYTHON, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

SCRIPT = r'''
import json
from array import array

import msgspec
import numpy as np
from vllm import SamplingParams
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.engine import (EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse,
                            EngineCoreRequest, FinishReason)
from vllm.v1.engine.utils import EngineHandshakeMetadata
from vllm.v1.metrics.stats import PrefillStats, SchedulerStats
from vllm.v1.outputs import LogprobsLists
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from textproc.engine import IncomingRequest
from textproc.vllm_front import wire

checks = {}

def incoming(**kw):
    base = dict(request_id="r1", prompt_token_ids=array("I", [1, 2, 3]), max_tokens=16,
                stop_token_ids=[7], sampling={"temperature": 0.0}, constraint=None,
                min_tokens=0, ignore_eos=False)
    base.update(kw)
    return IncomingRequest(**base)

def native(req):
    # what engine_vllm (vLLM's own classes, in process) builds for the same request
    s = req.sampling
    options = {"n": 1, "max_tokens": req.max_tokens, "min_tokens": req.min_tokens,
               "stop_token_ids": list(req.stop_token_ids), "ignore_eos": req.ignore_eos,
               "skip_special_tokens": False, "detokenize": False}
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                 "frequency_penalty", "repetition_penalty"):
        if s.get(name) is not None:
            options[name] = s[name]
    if req.logit_bias:
        options["logit_bias"] = dict(req.logit_bias)
    if req.logprobs is not None:
        options["logprobs"] = req.logprobs
    if req.index_key:
        options["structured_outputs"] = StructuredOutputsParams(regex="textproc-index:" + req.index_key)
    params = SamplingParams(**options)
    if req.eos_token_ids:
        params.update_from_generation_config({"eos_token_id": list(req.eos_token_ids)})
    if req.index_key:
        params.structured_outputs._backend = "textproc"
    return params

FIELDS = ("n", "max_tokens", "min_tokens", "ignore_eos", "temperature", "top_p", "top_k", "min_p",
          "seed", "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs",
          "logit_bias", "detokenize", "skip_special_tokens", "skip_reading_prefix_cache",
          "output_kind", "sampling_type")
cases = [
    incoming(),
    incoming(eos_token_ids=[151645, 151643], stop_token_ids=[151645, 151643, 9], min_tokens=3),
    incoming(eos_token_ids=[151645], ignore_eos=True, logprobs=5, logit_bias={42: -100.0},
             sampling={"temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 3,
                       "presence_penalty": 0.5, "repetition_penalty": 1.1}),
    incoming(index_key="abc", sampling={"temperature": 1.0, "max_reasoning_tokens": 4,
                                        "reasoning_close": "</think>"}),
]
decoder = MsgpackDecoder(EngineCoreRequest)
mismatches = []
for req in cases:
    data = wire.add_request(req.request_id, req.prompt_token_ids, wire.sampling_params(req), 5.0,
                            priority=2)
    got = decoder.decode([data])
    want = native(req)
    if (got.request_id, got.prompt_token_ids, got.arrival_time, got.priority) != ("r1", [1, 2, 3], 5.0, 2):
        mismatches.append(("request", str(got)[:300]))
    p = got.sampling_params
    for name in FIELDS:
        if getattr(p, name) != getattr(want, name):
            mismatches.append((name, repr(getattr(p, name)), repr(getattr(want, name))))
    if set(p.stop_token_ids or []) != set(want.stop_token_ids or []):
        mismatches.append(("stop_token_ids", p.stop_token_ids, want.stop_token_ids))
    if p.all_stop_token_ids != want.all_stop_token_ids:
        mismatches.append(("all_stop_token_ids", sorted(p.all_stop_token_ids), sorted(want.all_stop_token_ids)))
    so, wso = p.structured_outputs, want.structured_outputs
    if (so is None) != (wso is None) or (so is not None and (so.regex, so._backend) != (wso.regex, wso._backend)):
        mismatches.append(("structured_outputs", repr(so), repr(wso)))
    if req.index_key and p.extra_args != {"textproc": {"max_reasoning_tokens": 4, "reasoning_close": "</think>"}}:
        mismatches.append(("extra_args", p.extra_args))
checks["sampling_mismatches"] = mismatches

generic = MsgpackDecoder()
checks["abort"] = generic.decode([wire.abort_requests(["a", "b"])])
checks["utility"] = list(generic.decode([wire.utility_call(7, "textproc_put_index", ["k", {"masks": b"ab"}])]))
meta = msgspec.msgpack.decode(wire.handshake_reply(["tcp://h:1"], ["tcp://h:2"]), type=EngineHandshakeMetadata)
checks["handshake"] = [meta.addresses.inputs, meta.addresses.outputs, meta.addresses.coordinator_input]

def outputs_case(rows):
    ids = np.arange(rows * 3, dtype=np.int32).reshape(rows, 3) + 100
    values = -np.linspace(0.1, 2.0, rows * 3, dtype=np.float32).reshape(rows, 3)
    lp = LogprobsLists(ids, values, np.zeros(rows, dtype=np.int32), None)
    out = EngineCoreOutputs(engine_index=1, outputs=[
        EngineCoreOutput("a", list(range(rows)), new_logprobs=lp, finish_reason=FinishReason.STOP,
                         prefill_stats=PrefillStats(num_prompt_tokens=300, num_computed_tokens=300,
                                                    num_cached_tokens=256)),
        EngineCoreOutput("b", [9])],
        scheduler_stats=SchedulerStats(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25))
    frames = [bytes(f) for f in MsgpackEncoder().encode(out)]
    got = wire.decode_outputs(frames)
    a, b = got.outputs
    logprobs, top = wire.logprob_rows(a.new_logprobs)
    return {"frames": len(frames), "ids": [a.new_token_ids, b.new_token_ids],
            "reasons": [a.finish_reason, b.finish_reason], "cached": a.prefill_stats["num_cached_tokens"],
            "waiting": got.scheduler_stats["num_waiting_reqs"], "kv": got.scheduler_stats["kv_cache_usage"],
            "logprobs_ok": np.allclose(logprobs, values.reshape(-1)),
            "top_ok": top == ids[:, 1:].reshape(-1).tolist()}
checks["outputs_small"] = outputs_case(2)
checks["outputs_large"] = outputs_case(64)
checks["dead"] = wire.ENGINE_CORE_DEAD == __import__("vllm.v1.engine.core", fromlist=["x"]).EngineCoreProc.ENGINE_CORE_DEAD

ready = EngineCoreReadyResponse(max_model_len=4096, num_gpu_blocks=10, block_size=128,
    dp_stats_address=None, dtype="float32", vllm_version="0.32.0+cpu", world_size=1,
    data_parallel_size=2, tensor_parallel_size=1, pipeline_parallel_size=1,
    decode_context_parallel_size=1, data_parallel_rank=1, max_num_seqs=256,
    max_num_batched_tokens=2048, instance_id="x", supports_lora=False, max_loras=0)
info = wire.decode_ready(msgspec.msgpack.encode(ready))
checks["ready"] = [info["block_size"], info["num_gpu_blocks"], info["vllm_version"]]

from importlib.metadata import entry_points
checks["plugin_entry"] = [e.value for e in entry_points(group="vllm.general_plugins") if e.name == "textproc"]
import engine_vllm.plugin as plugin
plugin.register()
from vllm.v1.engine.core import EngineCore
checks["plugin_methods"] = [hasattr(EngineCore, "textproc_put_index"), hasattr(EngineCore, "textproc_drop_index")]
import vllm
checks["vllm_version"] = vllm.__version__
print(json.dumps(checks, default=str))
'''


@pytest.fixture(scope="module")
def engine_side() -> list[dict[str, Any]]:
    """Both scripts' results, from one run of the engine's Python (vLLM's import is most of
    its time): the wire checks, then the silent network's."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run([str(VLLM_PYTHON), "-c", SCRIPT + SILENT_LINK], capture_output=True,
                          text=True, timeout=240, env=env, cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.strip().splitlines()[-2:]]


def test_frames_read_and_write_as_vllms_own(engine_side: list[dict[str, Any]]) -> None:
    checks = engine_side[0]
    assert checks["vllm_version"].split("+")[0] == "0.32.0"  # the wire textproc pins
    assert checks["sampling_mismatches"] == []
    assert checks["abort"] == ["a", "b"]
    assert checks["utility"][:3] == [0, 7, "textproc_put_index"]
    assert checks["utility"][3][0] == "k"
    assert checks["handshake"] == [["tcp://h:1"], ["tcp://h:2"], None]
    for case, frames in (("outputs_small", 1), ("outputs_large", 4)):
        got = checks[case]
        assert got["frames"] == frames, got  # large arrays travel in frames of their own
        assert got["reasons"] == [0, None] and got["cached"] == 256 and got["waiting"] == 1
        assert got["logprobs_ok"] and got["top_ok"] and got["kv"] == 0.25
    assert checks["dead"]
    assert checks["ready"] == [128, 10, "0.32.0+cpu"]
    assert checks["plugin_entry"] == ["engine_vllm.plugin:register"], (
        "reinstall textproc in the engine's environment (bash scripts/setup_vllm.sh)")
    assert checks["plugin_methods"] == [True, True]


SILENT_LINK = r'''
import json, socket, threading, time
import zmq
import engine_vllm.plugin as plugin
plugin.register()
from vllm.v1.engine import core

ctx = zmq.Context()
front = ctx.socket(zmq.ROUTER)  # the front's input socket, no heartbeats of its own
front_port = front.bind_to_random_port("tcp://127.0.0.1")
relay = socket.create_server(("127.0.0.1", 0))
silent = threading.Event()

def pump(src, dst):
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            return
        if not data:
            return
        if not silent.is_set():  # a network gone quiet: bytes vanish, nobody closes anything
            dst.sendall(data)

def serve():
    engine_side, _ = relay.accept()
    front_side = socket.create_connection(("127.0.0.1", front_port))
    threading.Thread(target=pump, args=(engine_side, front_side), daemon=True).start()
    threading.Thread(target=pump, args=(front_side, engine_side), daemon=True).start()

threading.Thread(target=serve, daemon=True).start()
# the engine notes its worker class as vLLM constructs it (vllm_config by keyword from
# run_engine_core, first from a subclass's super().__init__); the rest of the construction
# is not wanted here: vLLM's own __init__ refuses the missing arguments
from types import SimpleNamespace

def noted(worker_cls, positional):
    config = SimpleNamespace(parallel_config=SimpleNamespace(worker_cls=worker_cls))
    engine = object.__new__(core.EngineCoreProc)
    try:
        if positional:
            core.EngineCoreProc.__init__(engine, config)
        else:
            core.EngineCoreProc.__init__(engine, vllm_config=config)
    except TypeError:
        pass
    return plugin._HEARTBEATS[0]

init_noted = [noted("engine_vllm.worker.TextprocCPUWorker", False), noted("auto", True),
              noted("engine_vllm.worker.TextprocCPUWorker", True), noted("auto", False)]
# an engine serving another frontend (vLLM's own worker) gets no heartbeats: SMG's ZeroMQ
# drops a connection at the first PING
plugin.serving_textproc("auto")
other = core.make_zmq_socket(zmq.Context(), "tcp://127.0.0.1:9", zmq.DEALER, bind=False)
others_heartbeat = other.getsockopt(zmq.HEARTBEAT_IVL)
other.close(0)
plugin.serving_textproc("engine_vllm.worker.TextprocCPUWorker")  # as `textproc engine` starts it
engine_ctx = zmq.Context()
dealer = core.make_zmq_socket(engine_ctx, f"tcp://127.0.0.1:{relay.getsockname()[1]}",
                              zmq.DEALER, identity=b"\x01\x00", bind=False)
monitor = dealer.get_monitor_socket()
from zmq.utils.monitor import recv_monitor_message
events = []
def wait_for(event, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if monitor.poll(200):
            got = recv_monitor_message(monitor)["event"]
            events.append(int(got))
            if got == event:
                return time.monotonic()
    return None

connected = wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED, 10) is not None
silent.set()
t0 = time.monotonic()
dropped = wait_for(zmq.EVENT_DISCONNECTED, 15)
print(json.dumps({"connected": connected, "dropped_after_s": None if dropped is None else dropped - t0,
                  "connect_timeout": dealer.getsockopt(zmq.CONNECT_TIMEOUT),
                  "others_heartbeat_ms": others_heartbeat, "init_noted": init_noted}))
'''


def test_an_engine_socket_notices_a_silent_network(engine_side: list[dict[str, Any]]) -> None:
    """The engine's input socket (made by vLLM's own function, with the plugin registered,
    in an engine with textproc's worker) finds a connection that went silent, half-open, and
    drops it so it can dial again: a remote engine whose network came back talks to the front
    again. An engine with another worker sends no heartbeats (another frontend may not answer
    them)."""
    got = engine_side[1]
    assert got["connected"], got
    assert got["dropped_after_s"] is not None and got["dropped_after_s"] < 10, got
    assert 0 < got["connect_timeout"] <= 5000, got  # a dial into a dead network gives up soon
    assert got["others_heartbeat_ms"] == 0, got  # only an engine started for textproc pings
    assert got["init_noted"] == [True, False, True, False], got  # vLLM's constructor notes it
