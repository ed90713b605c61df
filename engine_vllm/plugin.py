"""textproc's compiled constraints inside vLLM's own engine processes (``vllm serve --headless``),
as a vLLM general plugin (entry point ``vllm.general_plugins``: ``textproc``).

vLLM loads every general plugin in each of its processes; :func:`register` adds, harmlessly for
an engine that never talks to textproc:

- two utility methods on ``EngineCore`` that textproc calls over vLLM's own wire (a UTILITY
  frame on the input socket, so it arrives before the requests sent after it):
  ``textproc_put_index(key, tables)`` stores a compiled constraint (``TokenIndex.pack()``'s
  tables: no compile, regex or vocabulary here) and ``textproc_drop_index(key)`` forgets one;
- a structured-output backend, ``textproc``: a request whose ``StructuredOutputsParams`` has
  ``_backend="textproc"`` and ``regex="textproc-index:<key>"`` walks that index
  (:class:`engine_vllm.constraints.TextprocGrammar`, one table lookup per token, its state's
  mask row copied into vLLM's bitmask each step). A reasoning budget
  (``extra_args["textproc"]["max_reasoning_tokens"]`` and the other ``reasoning_*`` keys) is
  applied as ``engine_vllm`` applies it, over textproc's tokenizer of the model.

- ZeroMQ heartbeats on the engine's sockets towards the front, in an engine started with
  textproc's worker only (``--worker-cls engine_vllm.worker.TextprocCPUWorker``): a remote
  engine whose network went away dials again when it comes back (:func:`_heartbeats`);

- fast-forward: a constrained request's forced run becomes its speculative draft tokens
  (:func:`engine_vllm.fast_forward.supply_forced_drafts_everywhere`), verified in one step, when
  the engine runs with ``--speculative-config '{"method": "custom_class", "model":
  "engine_vllm.fast_forward.NoDrafts", "num_speculative_tokens": K}'`` (and textproc's worker);
  without speculative decoding vLLM never asks for drafts and nothing changes.

The cheaper CPU mask kernel is vLLM's ``--worker-cls engine_vllm.worker.TextprocCPUWorker``
(``textproc engine`` adds it). vLLM's structured-output manager holds one backend per engine, so
an engine serving textproc takes only textproc's constraints (textproc sends no others).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from textproc.vllm_front.wire import GUIDE_PREFIX as GUIDE_INDEX_PREFIX  # the front's

__all__ = ["register", "serving_textproc", "INDEXES", "MAX_INDEXES"]

_log = logging.getLogger("engine_vllm.plugin")

MAX_INDEXES = 1024  # indexes held per engine (textproc re-sends one it dropped)
INDEXES: OrderedDict[str, Any] = OrderedDict()  # key -> TokenIndex, oldest first
INDEX_WAIT_S = 60.0  # how long a request's grammar waits for its index (sent just before it)
_registered = False
_arrived = threading.Condition()  # an index was stored
_imports = threading.Lock()
_modules: dict[str, Any] = {}


def _constraints() -> dict[str, Any]:
    """textproc's table-only index and guide, imported once: the busy loop (utility calls) and
    vLLM's grammar threads would otherwise import the same modules at once, half-made."""
    with _imports:
        if not _modules:
            from textproc.core.constraints.index.guide import Guide
            from textproc.core.constraints.index.table import TokenIndex

            _modules.update(Guide=Guide, TokenIndex=TokenIndex)
        return _modules


def register() -> None:
    """vLLM's plugin hook (called once per process; idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    # here: vLLM calls this hook in each of its processes; importing vLLM at module level would
    # make `import engine_vllm.plugin` need vLLM even where nothing registers it
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.structured_output import StructuredOutputManager

    _heartbeats()
    from engine_vllm.fast_forward import supply_forced_drafts_everywhere

    supply_forced_drafts_everywhere()
    EngineCore.textproc_put_index = _put_index  # type: ignore[attr-defined]
    EngineCore.textproc_drop_index = _drop_index  # type: ignore[attr-defined]
    grammar_init = StructuredOutputManager.grammar_init
    create_grammar = StructuredOutputManager._create_grammar

    def textproc_grammar_init(self: Any, request: Any) -> None:
        params = request.sampling_params
        if (self.backend is None and request.structured_output_request is not None
                and params.structured_outputs._backend == "textproc"):
            from engine_vllm.constraints import TextprocBackend

            self.backend = TextprocBackend(self.vllm_config, None,
                                           self.vllm_config.model_config.get_vocab_size())
        grammar_init(self, request)

    def textproc_create_grammar(self: Any, request: Any) -> Any:
        # only the indexes sent over vLLM's wire; engine_vllm (in process) hands its guides to
        # its own backend, which vLLM's own _create_grammar asks
        structured = request.sampling_params.structured_outputs
        if structured._backend != "textproc" or not (structured.regex or "").startswith(
                GUIDE_INDEX_PREFIX):
            return create_grammar(self, request)
        return _grammar(self, request)

    StructuredOutputManager.grammar_init = textproc_grammar_init  # type: ignore[method-assign]
    StructuredOutputManager._create_grammar = textproc_create_grammar  # type: ignore[method-assign]


def _heartbeats() -> None:
    """ZeroMQ heartbeats on the engine's sockets towards its frontend (1 s, 5 s timeout), as
    textproc's front sets on its side: an engine whose network went away and came back sees
    its dead connections and dials again (without them its input socket, which it never
    writes to, would keep a half-open connection and never hear from the front again).

    A dial gives up after 2 s and tries again (the kernel's own connect timeout backs off to
    a minute and more while a network is away: the engine would come back that much later).

    Only in an engine serving textproc: one started with textproc's worker
    (``--worker-cls engine_vllm.worker...``, which ``textproc engine`` and the front add; see
    :func:`serving_textproc`). Another frontend may not answer a ZeroMQ PING: SMG's Rust
    ZeroMQ knows no command but READY and drops the connection at the first one, failing
    every request in flight.

    They are set as the defaults of the socket's context before vLLM makes it: ZeroMQ copies
    a socket's options into a connection when it dials, so options set after ``connect``
    would never reach the connection (each of vLLM's socket threads has a context of its own,
    holding only its connections to the frontend)."""
    import zmq
    from vllm.v1.engine import core

    make = core.make_zmq_socket

    def make_with_heartbeats(ctx: Any, path: str, socket_type: Any, *args: Any, **kwargs: Any) -> Any:
        if _HEARTBEATS[0] and socket_type in (zmq.DEALER, zmq.PUSH):
            ctx.setsockopt(zmq.HEARTBEAT_IVL, 1000)
            ctx.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
            ctx.setsockopt(zmq.CONNECT_TIMEOUT, 2000)
        return make(ctx, path, socket_type, *args, **kwargs)

    core.make_zmq_socket = make_with_heartbeats
    init = core.EngineCoreProc.__init__

    def init_noting_worker(self: Any, *args: Any, **kwargs: Any) -> None:
        # vLLM passes vllm_config by keyword (run_engine_core) or first (a subclass's super())
        config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
        serving_textproc(str(config.parallel_config.worker_cls or ""))
        init(self, *args, **kwargs)  # the handshake and the socket threads start in here

    core.EngineCoreProc.__init__ = init_noting_worker


_HEARTBEATS = [False]  # this process's engine serves textproc: its sockets get heartbeats


def serving_textproc(worker_cls: str) -> bool:
    """Note the engine's worker class (vLLM's ``--worker-cls``, before the engine makes its
    sockets): textproc's own (``engine_vllm.``) means the engine serves textproc, and its
    sockets towards the frontend get heartbeats. Returns that."""
    _HEARTBEATS[0] = worker_cls.startswith("engine_vllm.")
    return _HEARTBEATS[0]


def _put_index(self: Any, key: str, tables: dict[str, Any]) -> int:
    """Store a compiled constraint under ``key``; its number of states."""
    index = _constraints()["TokenIndex"].unpack(key=key, **tables)
    with _arrived:
        INDEXES.pop(key, None)
        INDEXES[key] = index
        while len(INDEXES) > MAX_INDEXES:
            INDEXES.popitem(last=False)
        _arrived.notify_all()
    return int(index.n_states)


def _drop_index(self: Any, key: str) -> bool:
    return INDEXES.pop(key, None) is not None


def _grammar(manager: Any, request: Any) -> Any:
    from engine_vllm.constraints import TextprocBackend, TextprocGrammar

    spec = request.sampling_params.structured_outputs.regex or ""
    if not spec.startswith(GUIDE_INDEX_PREFIX):
        raise ValueError(f"textproc's backend takes only textproc's indexes, got {spec[:80]!r}")
    key = spec[len(GUIDE_INDEX_PREFIX):]
    # vLLM's input thread starts a request's grammar as soon as the request arrives, before
    # the busy loop runs the utility call sent ahead of it with its index: wait for that
    with _arrived:
        if not _arrived.wait_for(lambda: key in INDEXES, timeout=INDEX_WAIT_S):
            raise ValueError(f"constraint index {key!r} did not reach this engine within "
                             f"{INDEX_WAIT_S:g} s ({len(INDEXES)} held)")
        INDEXES.move_to_end(key)
        index = INDEXES[key]
    guide = _constraints()["Guide"](index)
    extra = (request.sampling_params.extra_args or {}).get("textproc") or {}
    if extra.get("max_reasoning_tokens") is not None:
        _budgets(manager).apply(guide, extra)
    backend = manager.backend
    assert isinstance(backend, TextprocBackend)
    return TextprocGrammar(guide, backend.masks, backend.fill_times, backend.violations)


def _budgets(manager: Any) -> Any:
    budgets = getattr(manager, "_textproc_budgets", None)
    if budgets is None:
        from textproc.core.constraints.plans.reasoning_budget import ReasoningBudgets
        from textproc.core.tokenizer import Tokenizer

        tok = Tokenizer.from_dir(manager.vllm_config.model_config.tokenizer)
        budgets = manager._textproc_budgets = ReasoningBudgets(tok.token_bytes, tok.encode)
    return budgets
