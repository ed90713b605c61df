"""Which CPUs textproc's own processes run on (``serve --text-cpus``).

An engine that binds its compute threads to CPUs (vLLM's CPU worker binds its OpenMP threads
to all cores but the ones it reserves "for everything else": on 2 cores, core 0 for the model,
core 1 reserved) is not preempted mid-forward-pass by processes that stay off those CPUs.
textproc's processes (tokenizer workers, detokenizers, HTTP frontends, the health port) wake
per token; with ``auto`` they are kept on the CPUs the engine left: the ones no thread of the
engine's process tree is bound to. The engine's own processes are never moved. The default is
``none`` (they float): on an idle 2-core box, keeping them all on the one reserved core cost
throughput (``bench/README.md``, "vllm"); on a box shared with other work ``auto`` helped.

``auto`` finds the engine's CPUs once the engine is ready (its model loaded, its threads bound):
a thread whose allowed CPUs are fewer than the ones this process may use is bound, and the CPUs
of every such thread are the engine's. Nothing bound (the stub, an engine run with binding off,
an engine not started by ``serve``) or nothing left over: nobody is moved. ``none``: nobody is
moved. A CPU list (``1``, ``2-7,12``): the text processes go there whatever the engine does.

Linux only (``/proc``, ``sched_setaffinity``); elsewhere nothing is moved and the log says so.
Reads ``/proc``; no sockets.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from textproc.errors import InvalidInput, short

__all__ = ["TEXT_CPUS_AUTO", "TEXT_CPUS_NONE", "check_text_cpus", "engine_cpus", "parse_cpu_list",
           "pin", "process_tree", "text_cpus_for"]

_log = logging.getLogger(__name__)

TEXT_CPUS_AUTO = "auto"
TEXT_CPUS_NONE = "none"
_PROC = Path("/proc")


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a Linux CPU list (``0-3,8``), as ``taskset -c`` and ``/proc`` write them.

    >>> sorted(parse_cpu_list("0-2,5"))
    [0, 1, 2, 5]
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        low, dash, high = part.partition("-")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise InvalidInput(f"a CPU list is numbers and ranges such as 0-3,8, got {short(text)}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise InvalidInput(f"CPU range {part!r} runs backwards in {short(text)}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on (empty where the platform cannot say)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return frozenset(getaffinity(0)) if getaffinity is not None else frozenset()


def check_text_cpus(value: str) -> str:
    """``value`` if it is ``auto``, ``none`` or a CPU list of CPUs this process may use."""
    if value in (TEXT_CPUS_AUTO, TEXT_CPUS_NONE):
        return value
    cpus = parse_cpu_list(value)
    allowed = available_cpus()
    if allowed and not cpus <= allowed:
        raise InvalidInput(f"text_cpus {value!r} names CPUs {sorted(cpus - allowed)} this process "
                           f"may not use (allowed: {sorted(allowed)})")
    return value


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (read from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def _thread_cpus(pid: int) -> list[frozenset[int]]:
    """The allowed CPUs of each thread of ``pid`` (none if it is gone)."""
    out = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    out.append(parse_cpu_list(line.split(":", 1)[1]))
        except OSError:
            continue
    return out


def engine_cpus(engine_pid: int) -> frozenset[int]:
    """The CPUs the threads of the engine's process tree are bound to: the union of every
    thread's allowed CPUs that are fewer than this process may use (empty: nothing bound)."""
    allowed = available_cpus()
    bound: set[int] = set()
    for pid in process_tree(engine_pid):
        for cpus in _thread_cpus(pid):
            if cpus < allowed:
                bound |= cpus
    return frozenset(bound)


def text_cpus_for(setting: str, engine_pid: int | None) -> frozenset[int] | None:
    """The CPUs textproc's processes go on for ``serve --text-cpus`` (None: leave them be),
    with a log line saying why."""
    if setting == TEXT_CPUS_NONE:
        return None
    if not hasattr(os, "sched_setaffinity") or not _PROC.is_dir():
        _log.info("text processes are not pinned: this platform has no sched_setaffinity")
        return None
    if setting != TEXT_CPUS_AUTO:
        cpus = parse_cpu_list(setting)
        _log.info("text processes on CPUs %s (--text-cpus)", _spell(cpus))
        return cpus
    if engine_pid is None:
        return None
    taken = engine_cpus(engine_pid)
    left = available_cpus() - taken
    if not taken or not left:
        _log.info("text processes are not pinned: the engine binds %s",
                  "no thread to CPUs" if not taken else "every CPU")
        return None
    _log.info("text processes on CPUs %s, the ones the engine's bound threads (CPUs %s) leave "
              "(--text-cpus auto; none to let them float)", _spell(left), _spell(taken))
    return left


def pin(pid: int, cpus: frozenset[int]) -> None:
    """Move every thread of process ``pid`` onto ``cpus`` (threads it starts later inherit
    that); a process already gone is skipped."""
    try:
        tasks = [int(t.name) for t in (_PROC / str(pid) / "task").iterdir()]
    except OSError:
        return
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError) as exc:
            _log.debug("could not pin thread %d of %d: %s", tid, pid, exc)


def _spell(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
