"""The child side of how every textproc process starts: one log format, the flags a supervised
child is started with, and the watch on the parent that started it.

Used by every textproc process entry: the supervisor (``cli.py``), the tokenizer workers and the
detokenizer (``service/bootstrap.ChildRuntime``), the HTTP frontend (``http/run.py``) and the
health port (``http/health.py``). The parent side (the command lines, spawning so that a child
dies with the supervisor, the ready handshake) is ``service/children.py``, which spells these
flags through :func:`child_flags`, so the two sides cannot drift. Standard library only: the
health process imports this and nothing heavy.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

__all__ = ["LOG_LEVELS", "PARENT_CHECK_S", "ParentWatch", "add_child_arguments", "child_flags",
           "setup_logging"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PARENT_CHECK_S = 0.5  # how often an asyncio child looks for its parent


def setup_logging(label: str, level: str) -> None:
    """The one log format of every textproc process: ``time label[pid] LEVEL logger: message``
    (``label``: ``supervisor``, ``worker-0``, ``detokenizer-1``, ``http``, ``health``). A no-op
    when the root logger already has a handler (a test that set one up, or a second call)."""
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {label}[%(process)d] %(levelname)s %(name)s: %(message)s",
    )


def child_flags(*, parent_pid: int, log_level: str | None = None) -> list[str]:
    """The flags the supervisor gives every textproc child it starts (what
    :func:`add_child_arguments` reads back); ``log_level`` None: the child's settings carry
    it (the workers and the detokenizer get the service's settings as JSON)."""
    return ["--parent-pid", str(parent_pid)] + ([] if log_level is None else
                                                ["--log-level", log_level])


def add_child_arguments(parser: argparse.ArgumentParser, *, log_level: bool = True) -> None:
    """``--parent-pid`` (and ``--log-level`` unless ``log_level`` is False) on a process
    entry's parser."""
    parser.add_argument("--parent-pid", type=int, default=0,
                        help="exit when this process (the supervisor) is gone (default 0: none)")
    if log_level:
        parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                            help="log level (default INFO)")


class ParentWatch:
    """Whether the process that started this one still runs (``parent_pid`` 0: no parent to
    watch). A child is reparented when its parent dies, so ``os.getppid()`` changes: no
    signal is needed, and it works after a ``kill -9`` of the supervisor too."""

    def __init__(self, parent_pid: int) -> None:
        self.parent_pid = parent_pid

    def alive(self) -> bool:
        return self.parent_pid <= 0 or os.getppid() == self.parent_pid

    async def wait_gone(self, *, interval_s: float = PARENT_CHECK_S) -> None:
        """Return once the parent is gone (never without one); logs it."""
        if self.parent_pid <= 0:
            await asyncio.Event().wait()
        while self.alive():
            await asyncio.sleep(interval_s)
        logging.getLogger("textproc.lifecycle").warning(
            "parent process %d is gone; shutting down", self.parent_pid)
