"""The engine process: vLLM's ``EngineCore`` and textproc's ``EngineLink`` in one loop.

Per iteration: take new requests and aborts from the link, add them to (or abort them in)
vLLM's scheduler, run one ``EngineCore.step()`` (schedule, forward, sample: vLLM's own code,
unmodified), and send that step's new ids, finish reasons and logprobs back as ONE step frame,
while the model worker runs the next step (``VllmEngine._overlap_sends``). With a request's
first output goes the number of its prompt tokens vLLM found in its prefix cache (its
``PrefillStats.num_cached_tokens``: what ``vllm serve`` reports as ``cached_tokens``). No extra process
or hop sits between textproc and the engine core (vLLM's own model executor may run its
worker in a process of its own, as it does behind its own server).

Constraints: a request whose ``IncomingRequest.guide`` is set gets vLLM's structured-output
path with :class:`engine_vllm.constraints.TextprocBackend`, which hands vLLM that guide (no
compile in this process); vLLM fills its bitmask from the guide's state every step. A guide on
a partial index (the first states of a progressive compile) starts at once: its prompt is
prefilled and it decodes on the states built so far; a request whose walk reaches a state
not built yet is left out of vLLM's schedule (:func:`engine_vllm.constraints.pause_unready`),
keeping its place, until the whole index arrives, so a vLLM output never reaches a state
without a mask. With ``--fast-forward K`` a guide's forced run goes to vLLM as the request's
draft tokens (:func:`engine_vllm.fast_forward.supply_forced_drafts`), verified in one step.

Aborts: textproc already ended an aborted request, so it is removed from vLLM's scheduler (its
KV blocks freed) and sends nothing more. The stats file (``--stats-file``) shows vLLM's own
scheduler state: running and waiting requests, free KV blocks, per-request counts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from types import FrameType
from typing import Any

from engine_vllm.startup import VllmSettings, build_core, engine_args, parse_args
from textproc.engine import EngineLink, IncomingRequest, link_counters, write_stats_file
from textproc.engine.calls import call_args

__all__ = ["VllmEngine", "main"]

_log = logging.getLogger("engine_vllm")

IDLE_WAIT_S = 0.05  # how long an idle loop blocks on engine-in before checking signals/stats
MAX_TRACKED_REQUESTS = 4_096  # per-request stats kept (oldest dropped), written each interval
_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "error": "error",
           "repetition": "stop"}


class VllmEngine:
    """The loop. ``run()`` returns when ``stop()`` is called (SIGTERM/SIGINT in main)."""

    def __init__(self, settings: VllmSettings, core: Any) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
        from vllm.v1.engine import EngineCoreRequest

        from engine_vllm.constraints import TextprocBackend, pause_unready

        self.settings = settings
        self.core = core
        self._params_cls = SamplingParams
        self._structured_cls = StructuredOutputsParams
        self._request_cls = EngineCoreRequest
        manager = core.structured_output_manager
        vocab = core.vllm_config.model_config.get_vocab_size()
        self.backend = TextprocBackend(core.vllm_config, None, vocab)
        manager.backend = self.backend  # the manager builds none of its own once one is set
        # request-steps left out of vLLM's schedule waiting for their index's next states, and
        # requests started on a partial index
        self.partial_counts = {"paused": 0, "started_on_partial": 0}
        pause_unready(core.scheduler, self.partial_counts)
        # forced ids handed to vLLM as draft tokens, and the request-steps that had a run
        # (engine_vllm.fast_forward)
        self.draft_counts = {"forced_drafts": 0, "forced_runs": 0}
        if core.vllm_config.speculative_config is not None:
            from engine_vllm.fast_forward import supply_forced_drafts

            supply_forced_drafts(core.scheduler, self.draft_counts)
        curve = None
        if settings.curve_client_key is not None:
            from textproc.curve import load_client_keys

            curve = load_client_keys(client_secret_file=settings.curve_client_key,
                                     server_public_file=settings.curve_server_key)
        self.link = EngineLink(settings.engine_in, settings.engine_out, curve=curve)
        self.live: set[str] = set()  # request ids vLLM holds
        # not added yet: a guide whose first mask is not built, or a reasoning budget on a
        # partial index
        self.held: list[IncomingRequest] = []
        # an operator's pause or sleep (textproc.engine.calls): "new": new requests are held
        # (vLLM queues adds while paused), running ones go on; "all": nothing steps
        self.paused: str | None = None
        from vllm.lora.request import LoRARequest

        # vLLM's adapter ids count from 1
        self.loras = {name: LoRARequest(name, i, path)
                      for i, (name, path) in enumerate(settings.lora_modules, start=1)}
        # "wait" mode: (call id, clear_cache, sleep level or None), answered once none runs
        self.pause_waits: list[tuple[str, bool, int | None]] = []
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.steps = 0
        self.stalled = False  # the last step ran nothing: every live request waits for states
        self.tokens_generated = 0
        self.rejected = 0
        # wall seconds of the loop by phase: taking requests and aborts in, vLLM's step, the
        # outputs out (translation, and the sends that could not wait for the next step), and
        # the sends made while the model worker ran the next step (inside "step")
        self.loop_s = {"inputs": 0.0, "step": 0.0, "outputs": 0.0, "overlapped_send": 0.0}
        self._unsent: list[Any] = []  # the last step's outputs (and refusals), not sent yet
        # ... and the prompt tokens vLLM found cached for the requests among them with their
        # first output (vLLM's prefill stats: the usage's cached_tokens)
        self._unsent_cached: dict[str, int] = {}
        self._overlap_sends(core.model_executor)
        self._stop = threading.Event()

    def _overlap_sends(self, executor: Any) -> None:
        """Send a step's outputs while the model worker runs the next one.

        ``EngineCore.step()`` hands the batch to the model worker (``execute_model(...,
        non_block=True)``), then waits for it; the outputs of the step before go out right
        after that hand-off, on this thread (the link's sockets stay on one thread), instead
        of between the steps, where the worker would wait for the send. vLLM's own engine
        process does the same with an output thread. With an executor that runs the model in
        this process the send only moves behind the forward pass."""
        dispatch = executor.execute_model

        def execute_model(*args: Any, **kwargs: Any) -> Any:
            result = dispatch(*args, **kwargs)
            if self._unsent:
                t0 = time.perf_counter()
                self._send_unsent()
                self.loop_s["overlapped_send"] += time.perf_counter() - t0
            return result

        executor.execute_model = execute_model  # this instance only

    def _send_unsent(self) -> None:
        outputs, self._unsent = self._unsent, []
        if self._unsent_cached:
            cached, self._unsent_cached = self._unsent_cached, {}
            self.link.send_outputs(outputs, cached_tokens=cached)
        else:
            self.link.send_outputs(outputs)

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        s = self.settings
        link = self.link
        link.start()
        next_stats = time.monotonic()  # the first stats file at once, then every interval
        try:
            while not self._stop.is_set():
                if s.stats_file and time.monotonic() >= next_stats:
                    self.write_stats()
                    next_stats = time.monotonic() + s.stats_interval_s
                if not self.live or self.stalled or self.paused == "all":
                    # (stalled: every request waits for states)
                    busy = (self.held or self.stalled) and not self.paused
                    link.wait(0.002 if busy else IDLE_WAIT_S)
                elif not link.writable():  # textproc is behind: wait rather than drop tokens
                    time.sleep(0.001)
                    continue
                self.step()
        finally:
            if self._unsent and not link.closed:
                self._send_unsent()
            if s.stats_file:
                self.write_stats()
            link.close()

    def step(self) -> None:
        """Take requests and aborts, run one engine step, and send its outputs as one frame:
        while the next step runs (see ``_overlap_sends``), or now when no step follows."""
        link = self.link
        t0 = time.perf_counter()
        outputs = self._unsent
        requests = link.poll_requests()
        if self.held:  # their first masks may be built now: add them, in arrival order
            waiting, self.held = self.held, []
            requests = [*waiting, *requests]
        for request in requests:
            if self.paused:  # added on resume, in arrival order
                self.held.append(request)
                continue
            guide = request.guide  # .ready moves it onto the whole index once that arrived
            # (a reasoning budget's states come from a walk of the whole index)
            if guide is not None and (not guide.ready or (
                    guide.index.partial and "max_reasoning_tokens" in request.sampling)):
                self.held.append(request)
                continue
            if guide is not None and guide.index.partial:
                self.partial_counts["started_on_partial"] += 1
            self._add(request, outputs)
        aborts = link.poll_aborts()
        if aborts:
            if self.held:
                gone = set(aborts)
                for request in self.held:
                    if request.request_id in gone:
                        self._record(request.request_id, "abort")
                self.held = [r for r in self.held if r.request_id not in gone]
            known = [rid for rid in aborts if rid in self.live]
            if known:
                self.core.abort_requests(known)
                for rid in known:
                    self.live.discard(rid)
                    self._record(rid, "abort")
        for call in link.poll_calls():
            self._on_call(call, outputs)
        if self.pause_waits and not self.live:  # "wait": the running requests have ended
            self._end_pause_waits()
        times = self.loop_s
        t1 = time.perf_counter()
        times["inputs"] += t1 - t0
        if self.live and self.paused != "all":
            engine_outputs, executed = self.core.step_fn()  # what vLLM's own busy loop calls
            self.core.post_step(executed)
            self.stalled = not executed
            t0 = time.perf_counter()
            times["step"] += t0 - t1
            t1 = t0
            if self._unsent:  # vLLM ran no model this step
                self._send_unsent()
            outputs = self._unsent
            for eco in (engine_outputs or {}).values():
                for out in eco.outputs:
                    entry = self._entry(out)
                    if entry is not None:
                        outputs.append(entry)
            self.steps += 1
        if self._unsent and not (self.live and self.core.scheduler.has_requests()):
            self._send_unsent()  # no step follows to send them behind
        times["outputs"] += time.perf_counter() - t1

    def _lora(self, name: str) -> Any:
        """vLLM's LoRARequest of adapter ``name`` (None: the base model)."""
        if not name:
            return None
        lora = self.loras.get(name)
        if lora is None:
            raise ValueError(f"no LoRA adapter {name!r}; this engine has "
                             f"{sorted(self.loras) or 'none'} (--lora-modules)")
        return lora

    def _on_call(self, call: Any, outputs: list[Any]) -> None:
        """One operator's call (``textproc.engine.calls``): vLLM's own ``EngineCore`` method,
        with what vLLM's engine process adds around it (queueing new requests while paused,
        the "wait" pause mode, "abort" outputs for the requests a pause ends)."""
        core, link = self.core, self.link
        args = call_args(call)
        try:
            match call.method:
                case "reset_prefix_cache":
                    link.answer_call(call.call_id, bool(core.reset_prefix_cache(*args)))
                case "pause_scheduler":
                    self._pause(call.call_id, args[0], args[1], None, outputs)
                case "sleep":
                    self._pause(call.call_id, args[1], args[0] >= 1, args[0], outputs)
                case "resume_scheduler":
                    if self.pause_waits:
                        link.answer_call(call.call_id, error="resume called while a pause is "
                                         "still waiting for running requests to end; resume "
                                         "once the pause has answered", status=409)
                        return
                    core.resume_scheduler()
                    self.paused = None
                    link.answer_call(call.call_id, None)
                case "wake_up":
                    awake = bool(core.wake_up(*args))
                    if awake and not self.pause_waits:
                        self.paused = None
                    link.answer_call(call.call_id, awake)
                case "is_sleeping":
                    link.answer_call(call.call_id, bool(self.paused) or bool(core.is_sleeping()))
                case "load_lora_adapter":
                    self._load_lora(call.call_id, *args)
                case "unload_lora_adapter":
                    lora = self.loras.get(args[0])
                    if lora is None:
                        link.answer_call(call.call_id, error=f"The lora adapter {args[0]!r} "
                                         "cannot be found.", status=404)
                        return
                    core.remove_lora(lora.lora_int_id)
                    del self.loras[args[0]]
                    link.answer_call(call.call_id, True)
                case "is_scheduler_paused":
                    link.answer_call(call.call_id, bool(self.paused)
                                     or bool(core.is_scheduler_paused()))
                case _:
                    link.answer_call(call.call_id, error=f"engine_vllm has no method "
                                     f"{call.method!r}", status=501)
        except Exception as exc:  # noqa: BLE001 - vLLM refused it: the caller hears why
            _log.error("%s(%s) failed in vLLM: %s", call.method, args, exc)
            link.answer_call(call.call_id, error=f"vLLM's {call.method} failed: {exc}",
                             status=400 if isinstance(exc, ValueError) else 500)

    def _load_lora(self, call_id: str, name: str, path: str) -> None:
        """vLLM's runtime LoRA loading: the adapter's weights into the model worker now, its
        name for the requests that follow."""
        from vllm.lora.request import LoRARequest

        if self.core.vllm_config.lora_config is None:
            self.link.answer_call(call_id, error="LoRA is not enabled on this engine: start it "
                                  "with --lora-modules (or --engine-arg=--enable-lora)",
                                  status=400)
            return
        if name in self.loras:
            self.link.answer_call(call_id, error=f"The lora adapter {name!r} has already been "
                                  "loaded.", status=400)
            return
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):  # vLLM's 404
            self.link.answer_call(call_id, error=f"Loading lora {name} failed: No adapter found "
                                  f"for {path}", status=404)
            return
        lora = LoRARequest(name, max((r.lora_int_id for r in self.loras.values()), default=0)
                           + 1, path)
        self.core.add_lora(lora)  # raises (answered 400 / 500) when the adapter does not load
        self.loras[name] = lora
        self.link.answer_call(call_id, True)

    def _pause(self, call_id: str, mode: str, clear_cache: bool, sleep_level: int | None,
               outputs: list[Any]) -> None:
        """vLLM's pause modes: "abort" ends every request (the clients hear "abort"), "keep"
        freezes them, "wait" lets the running ones end and answers then (vLLM's in-process
        core has no "wait": this loop waits); new requests are held in every mode. A sleep
        pauses, then vLLM's executor sleeps at ``sleep_level`` (level 0: the pause only)."""
        self.paused = "all" if mode == "keep" else "new"
        if mode == "wait" and self.live:
            self.pause_waits.append((call_id, clear_cache, sleep_level))
            return
        self._pause_core("keep" if mode == "wait" else mode, clear_cache, sleep_level)
        if mode == "abort":
            ended = [*self.live, *(r.request_id for r in self.held)]
            for rid in ended:
                self.backend.guides.pop(rid, None)
                self._record(rid, "abort")
                outputs.append((rid, [], "abort"))
            self.live.clear()
            self.held = []
        self.link.answer_call(call_id, None)

    def _pause_core(self, mode: str, clear_cache: bool, sleep_level: int | None) -> None:
        if sleep_level is None:
            self.core.pause_scheduler(mode=mode, clear_cache=clear_cache)
        else:
            self.core.sleep(sleep_level, mode)

    def _end_pause_waits(self) -> None:
        waits, self.pause_waits = self.pause_waits, []
        for call_id, clear_cache, sleep_level in waits:
            try:
                self._pause_core("keep", clear_cache, sleep_level)
            except Exception as exc:  # noqa: BLE001 - vLLM refused it: the caller hears why
                self.link.answer_call(call_id, error=f"vLLM's pause failed: {exc}", status=500)
                continue
            self.link.answer_call(call_id, None)

    def _budgets(self) -> Any:
        """Reasoning budgets (textproc.core.constraints.plans.reasoning_budget) over textproc's tokenizer of the
        model, loaded on the first request that has one."""
        if getattr(self, "_reasoning_budgets", None) is None:
            from textproc.core.constraints.plans.reasoning_budget import ReasoningBudgets
            from textproc.core.tokenizer import Tokenizer

            tok = Tokenizer.from_dir(self.settings.model_dir)
            self._reasoning_budgets = ReasoningBudgets(tok.token_bytes, tok.encode)
        return self._reasoning_budgets

    def _add(self, request: IncomingRequest, outputs: list[Any]) -> None:
        rid = request.request_id
        try:
            params = self._params(request)
            core_request = self._request_cls(
                request_id=rid, prompt_token_ids=list(request.prompt_token_ids), mm_features=None,
                sampling_params=params, pooling_params=None, arrival_time=time.time(),
                lora_request=self._lora(request.lora), cache_salt=None,
                data_parallel_rank=None, priority=request.priority)
            if request.guide is not None:
                if "max_reasoning_tokens" in request.sampling:
                    self._budgets().apply(request.guide, request.sampling)
                self.backend.guides[rid] = request.guide
            vllm_request, wave = self.core.preprocess_add_request(core_request)
            self.core.add_request(vllm_request, wave)
        except Exception as exc:  # noqa: BLE001 - one bad request fails alone
            self.backend.guides.pop(rid, None)
            _log.error("request %r refused by vLLM: %s", rid, exc)
            self.rejected += 1
            outputs.append((rid, [], "error"))
            return
        self.live.add(rid)
        self.stalled = False  # a step may run it
        # the priority vLLM's scheduler holds for it (what its priority policy orders by)
        scheduled = self.core.scheduler.requests.get(rid)
        self.requests[rid] = {"generated": 0, "steps": 0, "finish_reason": None,
                              "priority": getattr(scheduled, "priority", None),
                              "lora": getattr(getattr(scheduled, "lora_request", None),
                                              "lora_name", "")}
        while len(self.requests) > MAX_TRACKED_REQUESTS:
            self.requests.popitem(last=False)

    def _params(self, request: IncomingRequest) -> Any:
        s = request.sampling
        options: dict[str, Any] = {
            "n": 1,
            "max_tokens": request.max_tokens,
            "min_tokens": request.min_tokens,
            "stop_token_ids": list(request.stop_token_ids),
            "ignore_eos": request.ignore_eos,
            "skip_special_tokens": False,
            "detokenize": False,
        }
        for name in ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                     "frequency_penalty", "repetition_penalty"):
            if s.get(name) is not None:
                options[name] = s[name]
        if request.logit_bias:
            options["logit_bias"] = dict(request.logit_bias)
        if request.logprobs is not None:
            options["logprobs"] = request.logprobs
        if request.guide is not None:
            from engine_vllm.constraints import GUIDE_PREFIX

            options["structured_outputs"] = self._structured_cls(
                regex=GUIDE_PREFIX + request.request_id)
        params = self._params_cls(**options)
        if request.eos_token_ids:
            # what vLLM's own server does in its input processor (its engine core never does):
            # the model's EOS ids stop the request unless ignore_eos, and are masked until
            # min_tokens either way (all_stop_token_ids). textproc chose the ids (tokenizer EOS
            # + generation config, per --generation-config), so none is passed as the
            # tokenizer's: they all stop as stop ids
            params.update_from_generation_config({"eos_token_id": list(request.eos_token_ids)})
        if request.guide is not None:
            params.structured_outputs._backend = "textproc"
        return params

    def _entry(self, out: Any) -> Any:
        """One vLLM output as an EngineLink entry (None for an aborted request: textproc
        ended it already)."""
        rid = out.request_id
        reason = None if out.finish_reason is None else _FINISH.get(str(out.finish_reason), "error")
        if reason == "abort":
            self.live.discard(rid)
            return None
        ids = list(out.new_token_ids)
        prefill = out.prefill_stats  # on a request's first output only
        if prefill is not None:
            self._unsent_cached[rid] = prefill.num_cached_tokens
        self.tokens_generated += len(ids)
        info = self.requests.get(rid)
        if info is not None:
            info["generated"] += len(ids)
            info["steps"] += 1  # engine steps that gave it ids (fewer with fast-forward)
        if reason is not None:
            self.live.discard(rid)
            self._record(rid, reason)
        lp = out.new_logprobs
        if lp is None or not ids:
            return (rid, ids, reason)
        # vLLM's rows: [sampled id, top 1..k], their logprobs the same way
        rows = lp.logprobs.tolist()
        ranked = lp.logprob_token_ids.tolist()
        logprobs = [value for row in rows for value in row]
        top_ids = [token for row in ranked for token in row[1:]]
        return (rid, ids, reason, logprobs, top_ids)

    def _record(self, rid: str, reason: str) -> None:
        info = self.requests.get(rid)
        if info is not None:
            info["finish_reason"] = reason
            info["ended_at"] = time.monotonic()

    def scheduler_state(self) -> dict[str, Any]:
        """vLLM's own view: requests it holds, running and waiting, free KV cache blocks and
        the KV-cache usage (0..1, as vLLM's ``vllm:kv_cache_usage_perc``)."""
        scheduler = self.core.scheduler
        state: dict[str, Any] = {
            "requests": len(scheduler.requests),
            "running": len(scheduler.running),
            "waiting": len(scheduler.waiting),
        }
        try:
            pool = scheduler.kv_cache_manager.block_pool
            state["free_kv_blocks"] = pool.get_num_free_blocks()
            state["kv_blocks"] = pool.num_gpu_blocks
            state["kv_cache_usage"] = scheduler.kv_cache_manager.usage
        except AttributeError:
            pass
        return state

    def stats(self) -> dict[str, Any]:
        link = self.link
        return {
            "pid": os.getpid(),
            "engine": "vllm",
            "instance_id": link.instance_id,
            "written_at": time.time(),
            "steps": self.steps,
            "tokens_generated": self.tokens_generated,
            "rejected": self.rejected,
            "live": len(self.live),
            "paused": self.paused,
            "loop_s": self.loop_s,
            "scheduler": self.scheduler_state(),
            # per constrained request per step: the state's mask copied into vLLM's bitmask
            "bitmask_fill_us": _percentiles(self.backend.fill_times),
            # sampled ids their constraint's mask did not allow (each a bug; 0 expected)
            "mask_violations": self.backend.violations.count,
            "mask_violations_last": list(self.backend.violations.last),
            "started_on_partial": self.partial_counts["started_on_partial"],
            "paused_request_steps": self.partial_counts["paused"],
            # --fast-forward: forced ids given to vLLM as drafts, request-steps that had a run
            "fast_forward": self.draft_counts,
            "link": link_counters(link),
            **({} if self.settings.stats_brief else {"requests": self.requests}),
        }

    def write_stats(self) -> None:
        path = self.settings.stats_file
        if not path:
            return
        write_stats_file(path, self.stats())


def _percentiles(seconds: Any) -> dict[str, float]:
    """p50 / p99 / max in microseconds of a window of durations in seconds."""
    values = sorted(seconds)
    if not values:
        return {"samples": 0}

    def pick(q: float) -> float:
        return float(values[min(len(values) - 1, int(q * (len(values) - 1)))] * 1e6)

    return {"samples": len(values), "p50": pick(0.5), "p99": pick(0.99), "max": values[-1] * 1e6}


def main(argv: Sequence[str] | None = None) -> int:
    """Start vLLM's engine core, then serve textproc until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s engine_vllm[{os.getpid()}] %(levelname)s %(message)s")
    settings = parse_args(argv)
    args = engine_args(settings)  # vLLM's flags checked before the slow start
    stopping = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if engine is not None:
            engine.stop()

    engine: VllmEngine | None = None
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    started = time.monotonic()
    _log.info("starting vLLM's engine core on %s (model load, KV cache, warm-up)", settings.model_dir)
    try:
        core = build_core(args)
    except Exception as exc:  # noqa: BLE001 - process entry: report and exit non-zero
        _log.error("vLLM's engine core did not start on %r: %s", settings.model_dir, exc)
        return 1
    if stopping.is_set():
        core.shutdown()
        return 0
    _log.info("vLLM's engine core is ready after %.1f s", time.monotonic() - started)
    engine = VllmEngine(settings, core)
    try:
        engine.run()
    finally:
        core.shutdown()
    _log.info("engine_vllm stopped after %d steps, %d tokens", engine.steps, engine.tokens_generated)
    return 0
