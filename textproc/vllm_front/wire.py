"""vLLM's engine-core wire (vLLM 0.32), spoken from outside vLLM: the frames textproc sends to
and reads from vLLM's own ``EngineCoreProc``, encoded and decoded with msgspec, no vLLM import.

vLLM's frontend and engines talk over ZeroMQ with msgpack (``vllm/v1/engine/__init__.py``,
``core.py``, ``utils.py``, ``serial_utils.py``):

- startup handshake, on a ROUTER the frontend binds: each engine's DEALER (identity = its
  data-parallel rank, 2 bytes little-endian) sends ``{"status": "HELLO", "local", "headless"}``;
  the frontend answers with ``EngineHandshakeMetadata`` (the input and output addresses the
  engine connects to, the coordinator's when there is one); after loading its model the engine
  sends ``{"status": "READY", ...}``;
- requests, on a ROUTER per input address: ``[identity, request type, msgpack]`` where the
  type is one byte (ADD, ABORT, UTILITY) and ADD carries an ``EngineCoreRequest`` (an array:
  request id, prompt ids, multimodal features, sampling params as a map of the fields that
  differ from their defaults, ...); the engine's first message on that socket is its
  ``EngineCoreReadyResponse`` (a map: max_model_len, num_gpu_blocks, block_size, ...);
- outputs, on a PULL per output address: ``EngineCoreOutputs`` (an array: engine index,
  per-request outputs, scheduler stats, timestamp, a utility result, ...), numpy arrays (the
  logprobs) as ``(dtype, shape, data)`` with the data inline (msgpack ext 3) or in a frame of
  its own; the frame ``ENGINE_CORE_DEAD`` when the engine dies of an error.

The layouts are vLLM's and change between releases: :data:`VLLM_VERSION` is the release this
module speaks, and ``tests/integration/test_vllm_wire.py`` encodes and decodes these frames with
vLLM's own classes in the engine's environment, so an upgrade fails there, loudly.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = ["VLLM_VERSION", "ADD", "ABORT", "UTILITY", "ENGINE_CORE_DEAD", "FINISH_REASONS",
           "Output", "Outputs", "add_request", "abort_requests", "utility_call", "handshake_reply",
           "decode_outputs", "decode_handshake", "decode_ready", "sampling_params",
           "logprob_rows"]

VLLM_VERSION = "0.32.0"

ADD = b"\x00"
ABORT = b"\x01"
UTILITY = b"\x03"
ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"

# vLLM's FinishReason (an int on the wire) as textproc's finish reasons; "repetition" (vLLM's
# repeated-pattern stop) ends the request as a stop
FINISH_REASONS = ("stop", "length", "abort", "error", "stop")

_RAW_VIEW = 3  # vLLM's msgpack ext type of an inline array's bytes
_encoder = msgspec.msgpack.Encoder()


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _RAW_VIEW:
        return bytes(data)
    raise ValueError(f"vLLM sent msgpack ext type {code}, which textproc does not read "
                     f"(pickled objects: the engine runs with insecure serialization?)")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def sampling_params(request: Any) -> dict[str, Any]:
    """vLLM's ``SamplingParams`` of one textproc request (an ``IncomingRequest``), as the map of
    the fields that differ from vLLM's defaults, what vLLM's own input processor would send:
    textproc detokenizes and checks stop strings itself (``detokenize`` off, no ``stop``), the
    model's EOS ids stop the request unless ``ignore_eos`` and are masked until ``min_tokens``
    either way (vLLM's ``update_from_generation_config``), and a compiled constraint is named
    for textproc's structured-output backend in the engine (``engine_vllm.plugin``)."""
    s = request.sampling
    params: dict[str, Any] = {"max_tokens": request.max_tokens, "detokenize": False,
                              "skip_special_tokens": False}
    if request.min_tokens:
        params["min_tokens"] = request.min_tokens
    if request.ignore_eos:
        params["ignore_eos"] = True
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                 "frequency_penalty", "repetition_penalty"):
        value = s.get(name)
        if value is not None:
            params[name] = value
    stop_ids = list(request.stop_token_ids)
    all_stop = set(stop_ids)
    eos = set(request.eos_token_ids)
    if eos:
        all_stop |= eos
        if not request.ignore_eos:
            stop_ids = list(eos | set(stop_ids))
    params["stop_token_ids"] = stop_ids
    if all_stop:
        params["_all_stop_token_ids"] = sorted(all_stop)
    if request.logit_bias:
        params["logit_bias"] = {int(k): float(v) for k, v in request.logit_bias.items()}
    if request.logprobs is not None:
        params["logprobs"] = request.logprobs
    if request.index_key:
        params["structured_outputs"] = {"regex": GUIDE_PREFIX + request.index_key,
                                        "_backend": "textproc"}
        if s.get("max_reasoning_tokens") is not None:
            extra = {k: s[k] for k in _BUDGET_KEYS if s.get(k) is not None}
            params["extra_args"] = {"textproc": extra}
    return params


GUIDE_PREFIX = "textproc-index:"  # StructuredOutputsParams(regex=GUIDE_PREFIX + index key)
_BUDGET_KEYS = ("max_reasoning_tokens", "reasoning_close", "reasoning_close_tag", "reasoning_open",
                "reasoning_starts_inside")


def add_request(request_id: str, prompt_ids: Sequence[int], params: dict[str, Any],
                arrival_time: float, *, data_parallel_rank: int | None = None,
                priority: int = 0) -> bytes:
    """An ADD frame's payload: vLLM's ``EngineCoreRequest`` (array-like; the fields after
    ``data_parallel_rank`` left at their defaults but ``priority``)."""
    fields: list[Any] = [request_id, list(prompt_ids), None, params, None, arrival_time, None,
                         None, data_parallel_rank]
    if priority:
        # prompt_embeds, prompt_is_token_ids, client_index, current_wave, then priority
        fields += [None, None, 0, 0, priority]
    return _encoder.encode(fields)


def abort_requests(request_ids: Sequence[str]) -> bytes:
    """An ABORT frame's payload: the request ids."""
    return _encoder.encode(list(request_ids))


def utility_call(call_id: int, method: str, args: Sequence[Any], client_index: int = 0) -> bytes:
    """A UTILITY frame's payload: ``(client_index, call_id, method, args)``; the engine calls
    ``EngineCore.<method>(*args)`` and answers in an ``EngineCoreOutputs.utility_output``."""
    return _encoder.encode([client_index, call_id, method, list(args)])


def handshake_reply(inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    """``EngineHandshakeMetadata``: where the engine connects; no coordinator (each rank of a
    dense model runs as an independent engine, as vLLM runs them)."""
    return _encoder.encode({
        "addresses": {"inputs": list(inputs), "outputs": list(outputs),
                      "coordinator_input": None, "coordinator_output": None,
                      "frontend_stats_publish_address": None},
        "parallel_config": {}})


def decode_handshake(data: bytes) -> dict[str, Any]:
    """An engine's HELLO / READY message (``status``, ``local``, ``headless``)."""
    message = _decoder.decode(data)
    if not isinstance(message, dict) or "status" not in message:
        raise ValueError(f"not a vLLM handshake message: {message!r:.200}")
    return message


def decode_ready(data: bytes) -> dict[str, Any]:
    """An engine's ``EngineCoreReadyResponse`` (a map), its first frame on an input socket."""
    message = _decoder.decode(data)
    if not isinstance(message, dict) or "max_model_len" not in message:
        raise ValueError(f"not vLLM's EngineCoreReadyResponse: {message!r:.200}")
    return message


class Output(msgspec.Struct, array_like=True, gc=False):
    """One request's part of a step (``EngineCoreOutput``'s first fields; the rest ignored)."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: Any = None
    new_prompt_logprobs_tensors: Any = None
    pooling_output: Any = None
    finish_reason: int | None = None
    stop_reason: Any = None
    events: Any = None
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None
    trace_headers: Any = None
    prefill_stats: Any = None  # a map: num_prompt_tokens, num_cached_tokens, ... (first output)


class Outputs(msgspec.Struct, array_like=True, gc=False):
    """One engine step (``EngineCoreOutputs``' fields textproc reads)."""

    engine_index: int = 0
    outputs: list[Output] = []
    scheduler_stats: Any = None  # a map: num_running_reqs, num_waiting_reqs, kv_cache_usage, ...
    timestamp: float = 0.0
    utility_output: Any = None  # [call_id, failure_message, result]
    finished_requests: Any = None


_outputs_decoder = msgspec.msgpack.Decoder(Outputs, ext_hook=_ext_hook)


def decode_outputs(frames: Sequence[bytes]) -> Outputs:
    """An output message (its first frame the msgpack, the rest arrays' buffers)."""
    outputs = _outputs_decoder.decode(frames[0])
    if len(frames) > 1:
        for out in outputs.outputs:
            if out.new_logprobs is not None:
                out.new_logprobs = [_buffer(part, frames) for part in out.new_logprobs]
    return outputs


def _buffer(encoded: Any, frames: Sequence[bytes]) -> Any:
    # an array's (dtype, shape, data): data an index into the message's frames when large
    if isinstance(encoded, list) and len(encoded) == 3 and isinstance(encoded[2], int):
        return [encoded[0], encoded[1], bytes(frames[encoded[2]])]
    return encoded


_ARRAY_CODES = {"<f4": "f", "<i4": "i", "<i8": "q", "<f8": "d", "<u4": "I"}


def _array(encoded: Any) -> tuple[array[Any], list[int]]:
    dtype, shape, data = encoded
    code = _ARRAY_CODES.get(dtype)
    if code is None:
        raise ValueError(f"vLLM sent an array of dtype {dtype!r}, which textproc does not read")
    values = array(code)
    values.frombytes(data)
    return values, list(shape)


def logprob_rows(encoded: Any) -> tuple[list[float], list[int]]:
    """vLLM's ``LogprobsLists`` of a step (rows ``[sampled id, top 1..k]`` and their logprobs)
    as an EngineLink entry's ``logprobs`` (1 + k floats per new id) and ``top_ids`` (k ids)."""
    ids, shape = _array(encoded[0])
    values, _ = _array(encoded[1])
    width = shape[1] if len(shape) > 1 else 1
    top: list[int] = []
    for row in range(len(ids) // width if width else 0):
        top.extend(ids[row * width + 1:(row + 1) * width])
    return values.tolist(), top
