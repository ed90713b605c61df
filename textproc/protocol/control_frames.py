"""The supervisor's frames: Ready on control, Ready and ProcessDied on events.

``control`` is a PULL the supervisor binds: each child announces itself with ``Ready``.
``events`` is a PUB it binds: it republishes ``Ready`` and says ``ProcessDied`` when a child
exits (``EventFrame``). These change with process lifecycle, not with requests.
"""

from __future__ import annotations

import msgspec

from textproc.protocol.version import PROTOCOL_VERSION

__all__ = ["Ready", "ProcessDied", "EventFrame"]


class Ready(msgspec.Struct, tag=True, array_like=True):
    """child -> supervisor (control), and supervisor -> everyone (events): a process is serving.

    The detokenizer also sends ``Ready(role="engine")`` when an engine's EngineHello arrives.
    A detokenizer's ``index`` is its shard (``--detokenizers N``), also in ``Ready(role="engine")``.
    """

    role: str  # "worker" | "detokenizer" | "engine"
    index: int
    pid: int
    protocol_version: int = PROTOCOL_VERSION


class ProcessDied(msgspec.Struct, tag=True, array_like=True):
    """supervisor -> everyone (events): a child exited; its requests are lost (it is restarted)."""

    role: str
    index: int
    exit_code: int
    pid: int = 0


EventFrame = Ready | ProcessDied
