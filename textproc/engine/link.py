"""EngineLink: an LLM engine's connection to textproc (imported as ``textproc.engine.EngineLink``).

Owns the engine's two sockets (``textproc.protocol`` describes the frames):

* ``engine_in``: PULL, connected; textproc's PUSH sends ``EngineRequest`` and ``EngineAbort`` on
  this ONE socket, so an abort never overtakes the request it aborts.
* ``engine_out``: PUSH, connected; ``EngineHello`` first (and again after every reconnect, with
  the same ``instance_id``, so a restarted textproc side learns who it talks to), then one step
  frame per call of :meth:`EngineLink.send_step` (columns: request ids, new ids, counts, finish
  reasons; the cheapest) or :meth:`EngineLink.send_outputs` (per-request tuples). With the
  default ``step_format="auto"`` ``send_step`` sends the columnar ``EngineStepPacked``
  (protocol 2) and ``send_outputs`` the per-request ``EngineStep`` (protocol 1: the tuples
  encode as they are, cheaper than turning them into columns); ``"packed"`` / ``"legacy"``
  send that frame from both. The link checks and converts what the engine gives;
  :class:`textproc.engine.sending.StepSender` encodes and sends the frames,
  :class:`textproc.engine.receiving.FrameReceiver` drains engine-in (requests, aborts, indexes,
  the reconnect check) and ``textproc.engine.connection`` makes the sockets.

Detokenizer shards (``textproc serve --detokenizers N``): give ``engine_in`` / ``engine_out`` as
sequences, shard k's address at k (``endpoints.json``'s ``detokenizers``, or
:meth:`EngineLink.for_service`). The link then connects one pair of sockets per shard, reads
requests, aborts and indexes from every shard, and sends each step's outputs for a request to
the shard that owns it (``textproc.sharding.shard_of``, the function the workers route by;
``StepSender`` splits the step with ``textproc.engine.routing``), one step frame per shard that
has entries. Each
shard gets its own ``EngineHello`` and its own index cache (each mirrors one shard's relay).
With one address each (the default) nothing of this runs.

Constraints: an ``EngineIndex`` frame (a compiled constraint, sent once before the first request
that names it) is unpacked into the link's index cache; each request whose ``index_key`` names
one gets ``IncomingRequest.guide`` (:class:`textproc.core.constraints.Guide`): table lookups
only, no compile, regex or vocabulary in the engine's process. The cache holds what textproc
says (it mirrors it and names evictions), capped at ``max_index_bytes``; a request naming an
index the link does not hold is rejected with ``"error"``.

Imports from the text core only the table-only index and guide, when the first index arrives.
Must never block the engine loop: every receive is
non-blocking, sends are non-blocking (a step that cannot be queued because textproc is gone for
longer than the send buffer covers is dropped and counted, never waited for), and a malformed
incoming frame is counted in ``malformed_frames`` and logged, never raised. A request frame that
decodes but breaks a rule (empty prompt, ``max_tokens < 1``, ...) is answered at once with a
step frame carrying ``(request_id, [], "error")`` so the caller does not wait forever.

Invariant: requests and aborts come out in the order textproc sent them. Both pollers read the
same socket (``poll_aborts`` right after ``poll_requests`` reuses its drain); an abort that
arrives for a request not yet handed to the engine removes that request from the pending queue
(the abort id is still reported; engines ignore unknown ids).

Cost (bench/enginelink.py): an idle drain is one zmq call; ``send_step`` encodes ready columns
(request ids list, token ids as ``array('I')`` / numpy uint32 / packed bytes) with no per-entry
Python work (1,024 requests: send half 36 us vs 23 us for a raw send of the bytes); with
``step_format="packed"`` ``send_outputs`` first turns the tuples into columns (zip, map, array:
~3x the cost of msgpack-encoding the nested tuples as they are, what "auto"/"legacy" do), in
exchange for a frame textproc decodes ~20x faster. Each new request adds a decode, a few checks
and a memcpy of its packed prompt ids (no per-token Python objects unless asked for).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from textproc.errors import InvalidInput, short

if TYPE_CHECKING:
    from textproc.curve import CurveClientKeys
from textproc.engine.connection import connect_shard, read_endpoints, shown
from textproc.engine.receiving import FrameReceiver
from textproc.engine.requests import IncomingRequest
from textproc.engine.sending import StepSender
from textproc.engine.steps import (
    NO_CACHED,
    NO_FINISHED,
    STEP_FORMATS,
    StepEntry,
    StepFormat,
    check_cached,
    check_columns,
    check_logprobs,
    columns,
    normalise,
    pack,
    pack_logprobs,
)
from textproc.transport import close_sockets, new_context
from textproc.protocol import (
    MAX_FRAME_BYTES,
    EngineCall,
    EngineCallResult,
    EngineStepPacked,
    StepOutput,
    step_entries,
)

__all__ = ["EngineLink", "SEND_HWM_FRAMES"]

# Steps queued in the engine's process while textproc is unreachable (about 10 s at 1 kHz).
SEND_HWM_FRAMES = 10_000


class EngineLink:
    """An engine's connection to textproc: poll requests and aborts, send one frame per step.

    The constructor only stores settings; :meth:`start` (or :meth:`connect`) creates the zmq
    context and sockets and sends ``EngineHello``. Not thread-safe: call it from the engine loop.
    In an engine loop (``tests/integration/test_engine_link.py`` runs this against a real
    service)::

        link = EngineLink.connect("ipc:///run/tp/engine-in", "ipc:///run/tp/engine-out")
        for req in link.poll_requests(): ...
        link.send_outputs([("req-1", [791], None), ("req-2", [13], "stop")])
    """

    def __init__(
        self,
        engine_in: str | Sequence[str],
        engine_out: str | Sequence[str],
        *,
        instance_id: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        send_hwm_frames: int = SEND_HWM_FRAMES,
        resend_hello_on_reconnect: bool = True,
        check_outputs: bool = False,
        prompt_ids_as_list: bool = False,
        step_format: StepFormat = "auto",
        curve: CurveClientKeys | None = None,
        max_index_bytes: int = 1 << 30,
    ) -> None:
        """``curve``: CURVE client keys for a service started with ``--curve-dir``
        (``textproc.curve.load_client_keys(client_secret_file=..., server_public_file=...)``).
        ``engine_in`` / ``engine_out``: one address each, or one per detokenizer shard."""
        if step_format not in STEP_FORMATS:
            raise InvalidInput(
                f"EngineLink step_format must be one of {STEP_FORMATS}, got {short(step_format)}"
            )
        ins = (engine_in,) if isinstance(engine_in, str) else tuple(engine_in)
        outs = (engine_out,) if isinstance(engine_out, str) else tuple(engine_out)
        if not ins or len(ins) != len(outs) or not all(isinstance(a, str) for a in ins + outs):
            raise InvalidInput(
                f"EngineLink needs one engine_in and one engine_out address per detokenizer "
                f"shard, got engine_in={short(engine_in)} engine_out={short(engine_out)}"
            )
        self.step_format = step_format
        self.engine_ins = ins  # shard k's addresses at k
        self.engine_outs = outs
        self.n_shards = len(ins)
        self.instance_id = instance_id if instance_id is not None else uuid.uuid4().hex
        self.max_frame_bytes = max_frame_bytes
        self.send_hwm_frames = send_hwm_frames
        self.resend_hello_on_reconnect = resend_hello_on_reconnect
        self.check_outputs = check_outputs
        self.prompt_ids_as_list = prompt_ids_as_list
        self.curve = curve
        self.max_index_bytes = max_index_bytes
        self._sender = StepSender(self.instance_id, outs, send_hwm_frames)
        self._receiver = FrameReceiver(
            self.instance_id,
            ins[0],
            self._sender,
            n_shards=self.n_shards,
            max_frame_bytes=max_frame_bytes,
            max_index_bytes=max_index_bytes,
            prompt_ids_as_list=prompt_ids_as_list,
            step_format=step_format,
        )
        self._context: zmq.Context[Any] | None = None
        # every shard's sockets, shard k at k; empty before start() and after close()
        self._shard_ins: list[zmq.Socket[Any]] = []
        self._shard_outs: list[zmq.Socket[Any]] = []
        self._monitors: list[zmq.Socket[Any]] = []
        self._poller: zmq.Poller | None = None  # wait() on every shard's engine-in
        self._sockets: list[zmq.Socket[Any]] = []
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # lifecycle -------------------------------------------------------------------------------

    @classmethod
    def connect(cls, engine_in: str | Sequence[str], engine_out: str | Sequence[str],
                **options: Any) -> EngineLink:
        """Build a link and :meth:`start` it; same keyword options as the constructor."""
        link = cls(engine_in, engine_out, **options)
        link.start()
        return link

    @classmethod
    def for_service(cls, runtime_dir: str, **options: Any) -> EngineLink:
        """A link (not started) to every detokenizer shard of the service whose
        ``endpoints.json`` is in ``runtime_dir``; same keyword options as the constructor."""
        ins, outs = read_endpoints(runtime_dir)
        return cls(ins, outs, **options)

    def start(self) -> None:
        """Create the zmq context and sockets, connect both, queue ``EngineHello``."""
        if self._context is not None:
            raise InvalidInput(f"EngineLink to {shown(self.engine_ins)} already started")
        context: zmq.Context[Any] = new_context()
        self._context = context
        self._finalizer = weakref.finalize(self, close_sockets, self._sockets, context)
        try:
            for address_in, address_out in zip(self.engine_ins, self.engine_outs):
                sock_in, sock_out, monitor = connect_shard(
                    context, address_in, address_out, self._sockets,
                    send_hwm_frames=self.send_hwm_frames, curve=self.curve,
                    with_monitor=self.resend_hello_on_reconnect,
                )
                if monitor is not None:
                    self._monitors.append(monitor)
                self._shard_ins.append(sock_in)
                self._shard_outs.append(sock_out)
        except zmq.ZMQError as exc:
            self.close()
            raise InvalidInput(
                f"cannot connect EngineLink to engine_in={shown(self.engine_ins)} "
                f"engine_out={shown(self.engine_outs)}: {exc}; expected tcp://host:port or ipc://path"
            ) from exc
        if self.n_shards > 1:
            self._poller = zmq.Poller()
            for sock_in in self._shard_ins:
                self._poller.register(sock_in, zmq.POLLIN)
        self._sender.attach(self._shard_outs)
        self._receiver.attach(self._shard_ins, self._monitors)
        for shard in range(self.n_shards):
            self._sender.hello(shard)

    def close(self) -> None:
        """Close the sockets (linger=0) and the context; safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()
        self._poller = None
        self._shard_ins, self._shard_outs, self._monitors = [], [], []
        self._sender.attach([])
        self._receiver.attach([], [])

    @property
    def closed(self) -> bool:
        return not self._shard_ins

    def __enter__(self) -> EngineLink:
        if self._context is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # receiving (textproc.engine.receiving.FrameReceiver drains and decodes engine-in) --------

    def poll_requests(self) -> list[IncomingRequest]:
        """New requests received since the last call, in arrival order; never blocks."""
        return self._receiver.poll_requests()

    def poll_aborts(self) -> list[str]:
        """Ids of requests to stop, received since the last call, in arrival order; never blocks.

        Call it after :meth:`poll_requests` in each step: an abort that arrives in the same drain
        as its request is then applied after the request was added, and it reuses that drain
        (one receive per step; frames arriving in between wait for the next step).
        """
        return self._receiver.poll_aborts()

    def poll_calls(self) -> list[EngineCall]:
        """Operators' calls of engine methods (``EngineCall``: vLLM's ``EngineCore`` method
        names, ``textproc.engine.calls``) received since the last call; never blocks. Call it
        after :meth:`poll_requests` (it reuses that drain). Answer each with
        :meth:`answer_call`; a call never answered times out at the caller."""
        return self._receiver.poll_calls()

    def answer_call(self, call_id: str, result: Any = None, *, error: str = "",
                    status: int = 200) -> bool:
        """Answer ``EngineCall`` ``call_id`` with its ``result``, or with ``error`` and an HTTP
        ``status`` (400: bad arguments, 501: no such method here); on the shard it came from.
        False when the answer could not be queued (textproc unreachable)."""
        shard = self._receiver.call_shards.pop(call_id, 0)
        if error and status == 200:
            status = 500
        return self._sender.frame(EngineCallResult(call_id, result, error, status), shard)

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for input on engine-in (for an idle engine); True if any."""
        if not self._shard_ins:
            raise InvalidInput("EngineLink.wait on a link that is not started or closed")
        if self._receiver.requests or self._receiver.aborts or self._receiver.calls:
            return True
        if self._poller is not None:
            return bool(self._poller.poll(max(0, int(timeout_s * 1000))))
        return bool(self._shard_ins[0].poll(max(0, int(timeout_s * 1000))))

    @property
    def input_sockets(self) -> list[zmq.Socket[Any]]:
        """The engine-in sockets (one per shard), for a loop that polls them beside its own
        (a process that is not an engine, between textproc and engines); read them only
        through :meth:`poll_requests`."""
        return list(self._shard_ins)

    def writable(self) -> bool:
        """True when a step can be queued now (the send queue to textproc is not full)."""
        if not self._shard_outs:
            raise InvalidInput("EngineLink.writable on a link that is not started or closed")
        return self._sender.writable()

    @property
    def index_bytes(self) -> int:
        """Bytes the cached constraint indexes take (summed over the shards' caches)."""
        return sum(cache.nbytes for cache in self._receiver.caches)

    @property
    def indexes_received(self) -> int:
        """Constraint indexes stored since the link started (from every shard)."""
        return sum(cache.received for cache in self._receiver.caches)

    @property
    def malformed_frames(self) -> int:
        """Frames on engine-in that failed to decode or validate (counted, never raised)."""
        return self._receiver.malformed_frames

    @property
    def rejected_requests(self) -> int:
        """Well-formed request frames answered at once with finish_reason "error"."""
        return self._receiver.rejected_requests

    # sending (textproc.engine.sending.StepSender makes and sends the frames) ------------------

    @property
    def steps_sent(self) -> int:
        """The next step frame's number (steps sent so far, plus lost-request reports)."""
        return self._sender.steps_sent

    @property
    def dropped_steps(self) -> int:
        """Step frames not queued (textproc unreachable, its queue full): never waited for."""
        return self._sender.dropped_steps

    @property
    def lost_requests_reported(self) -> int:
        """Requests of dropped steps reported to textproc as finished with "error"."""
        return self._sender.lost_requests_reported

    @property
    def hellos_sent(self) -> int:
        return self._sender.hellos_sent

    def send_step(
        self,
        request_ids: Sequence[str],
        token_ids: Any,
        *,
        counts: Any = None,
        finished: Mapping[int, str] | None = None,
        logprobs: Any = None,
        top_ids: Any = None,
        cached_tokens: Mapping[str, int] | None = None,
    ) -> None:
        """Send one step in columns as ONE ``EngineStepPacked`` frame; never blocks. Cheapest.

        ``request_ids[i]`` produced ``counts[i]`` new ids, the next ones in ``token_ids``
        (every request's new ids one after the other). ``counts=None``: exactly one id per
        request (a plain decode step). ``token_ids`` and ``counts`` are ``array('I')``, numpy
        uint32 arrays, packed little-endian uint32 bytes (``pack_ids``) or sequences of ints
        (slower: converted first). ``finished`` maps an index into ``request_ids`` to its
        finish reason ("stop" for a stop token / EOS, "length", "abort", "error"); other
        requests keep running. Lengths are always checked (``InvalidInput``); with
        ``check_outputs=True`` also the count sum and the finish reasons.

        Logprobs (for requests whose ``IncomingRequest.logprobs`` is not None): ``logprobs``
        holds one row of ``1 + k`` floats per new id, in ``token_ids`` order (the sampled id's
        logprob, then its k alternatives', most likely first; a (n_tokens, 1 + k) numpy float32
        array, ``array('f')``, packed float32 bytes or floats), ``top_ids`` the k alternative
        ids of each row (uint32, as ``token_ids``). k is the largest any request of the step
        asked; rows of requests that asked for fewer (or none) are read only that far, so
        anything may pad them. Omit both when no request of the step wants logprobs.

        ``cached_tokens`` maps a request id to the number of its prompt tokens the engine found
        in its prefix cache, given once, in the step of the request's first output (the API's
        ``usage.prompt_tokens_details.cached_tokens``; a request never named reports 0).

        For example ``link.send_step(["r1", "r2"], array("I", [791, 13]), finished={1: "stop"})``.
        """
        if type(request_ids) is not list and type(request_ids) is not tuple:
            request_ids = list(request_ids)
        n = len(request_ids)
        tokens = pack(token_ids, "token_ids")
        packed_counts = b"" if counts is None else pack(counts, "counts")
        if finished is None:
            finished = NO_FINISHED
        n_tokens = len(tokens) // 4
        if packed_counts:
            if len(packed_counts) != 4 * n:
                raise InvalidInput(
                    f"send_step: {len(packed_counts) // 4} counts for {n} request_ids; expected "
                    f"one count per request id"
                )
        elif n_tokens != n:
            raise InvalidInput(
                f"send_step: {n_tokens} token_ids for {n} request_ids without counts; expected "
                f"one id per request, or counts"
            )
        if cached_tokens is None:
            cached_tokens = NO_CACHED
        if self.check_outputs:
            check_columns(request_ids, n_tokens, packed_counts, finished)
            check_cached(cached_tokens, "send_step")
        floats = alt_ids = b""
        if logprobs is not None:
            floats = pack_logprobs(logprobs, "send_step: logprobs")
            alt_ids = pack(top_ids if top_ids is not None else b"", "top_ids")
            check_logprobs(n_tokens, floats, alt_ids, "send_step")
        if self.step_format == "legacy":
            frame = EngineStepPacked(0, list(request_ids), tokens, packed_counts, dict(finished))
            entries: list[Any] = [(rid, list(ids), reason) for rid, ids, reason in zip(
                *step_entries(frame))]
            if floats:
                entries = _with_logprobs(entries, floats, alt_ids)
            self._sender.entries(entries, cached_tokens)
            return
        self._sender.packed(request_ids, tokens, packed_counts, finished, floats, alt_ids,
                            cached_tokens)

    def send_outputs(self, outputs: Iterable[StepEntry], *,
                     cached_tokens: Mapping[str, int] | None = None) -> None:
        """Send one step's outputs as ONE step frame; never blocks.

        Each entry is ``(request_id, new_token_ids, finish_reason)`` (finish_reason None while
        the request runs; "stop" for a stop token / EOS, "length", "abort" or "error"), a
        2-tuple without the reason, or a ``StepOutput``. By default (``step_format`` "auto" or
        "legacy") lists and tuples of lists of ints are encoded as they are into an
        ``EngineStep``, with no per-entry Python work; with ``step_format="packed"`` they are
        turned into ``EngineStepPacked`` columns (zip, map, array; costs the engine more, saves
        textproc more; an engine that holds columns already should call :meth:`send_step`).
        Other iterables and id sequences (``array``, ``range``, numpy) are converted first.
        With logprobs an entry is ``(request_id, new_token_ids, finish_reason, logprobs,
        top_ids)`` (``logprobs``: 1 + k floats per new id, the sampled id's then its k
        alternatives'; ``top_ids``: the k alternative ids per new id; lists encode as they are,
        arrays are packed first); a step with such entries always goes out as an
        ``EngineStep`` (per-request rows, any k per request). The
        hot path trusts its input (a wrong entry reaches textproc and fails that request
        there; in "packed" a token id outside uint32 raises ``InvalidInput``); with
        ``EngineLink(check_outputs=True)`` every entry is checked and a bad one raises
        ``InvalidInput`` naming it. ``cached_tokens``: as in :meth:`send_step`.
        """
        if type(outputs) is not list and type(outputs) is not tuple:
            outputs = list(outputs)
        if cached_tokens is None:
            cached_tokens = NO_CACHED
        if self.check_outputs:
            outputs = normalise(outputs)
            check_cached(cached_tokens, "send_outputs")
        if self.step_format != "packed":
            self._sender.entries(outputs, cached_tokens)
            return
        try:
            cols = columns(outputs)
        except (TypeError, ValueError, OverflowError):
            fixed = normalise(outputs)
            if any(len(entry) == 5 for entry in fixed):  # logprobs: per-request rows
                self._sender.entries(fixed, cached_tokens)
                return
            cols = columns(fixed)
        self._sender.packed(*cols, cached_tokens=cached_tokens)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"EngineLink(engine_in={shown(self.engine_ins)}, engine_out={shown(self.engine_outs)}, "
            f"instance_id={self.instance_id!r}, {state})"
        )


def _with_logprobs(entries: list[Any], logprobs: bytes, top_ids: bytes) -> list[Any]:
    """Per-request ``StepOutput`` rows cut from a packed step's logprob columns."""
    n_tokens = sum(len(entry[1]) for entry in entries)
    width = len(logprobs) // 4 // n_tokens
    out: list[Any] = []
    at = 0
    for rid, ids, reason in entries:
        end = at + len(ids)
        out.append(StepOutput(rid, ids, reason, logprobs[4 * width * at:4 * width * end],
                              top_ids[4 * (width - 1) * at:4 * (width - 1) * end]))
        at = end
    return out

