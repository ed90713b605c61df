"""What an LLM engine imports to talk to textproc: ``EngineLink`` and the types it hands over.

Parts: ``link`` (EngineLink: the two sockets, polling requests and aborts, sending steps; its
halves ``receiving``, ``sending`` with ``routing``, and ``connection`` for the sockets),
``requests`` (IncomingRequest and the checks on a decoded request), ``steps`` (step entries,
formats, finish reasons and the packing of step frames), ``indexes`` (the constraint index
cache), ``stats`` (an engine's stats file). Public names are re-exported here,
so ``from textproc.engine import EngineLink`` is the one import an engine needs.
"""

from __future__ import annotations

from textproc.engine.link import SEND_HWM_FRAMES, EngineLink
from textproc.engine.requests import IncomingRequest
from textproc.engine.stats import link_counters, write_stats_file
from textproc.engine.steps import FINISH_REASONS, StepEntry, StepFormat

__all__ = [
    "EngineLink",
    "IncomingRequest",
    "StepEntry",
    "StepFormat",
    "SEND_HWM_FRAMES",
    "FINISH_REASONS",
    "link_counters",
    "write_stats_file",
]
