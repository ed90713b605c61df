"""Garbage-collector settings of a serving process: what it made while starting is kept out of
every collection, and the collection thresholds it serves with.

One mechanism for every textproc process (workers, detokenizer, HTTP frontend): each calls
:func:`freeze_heap` once it is ready to serve.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_heap"]


def freeze_heap(thresholds: tuple[int, int, int] | None = None) -> None:
    """Collect, then keep everything allocated so far (a vocabulary's millions of long-lived
    objects, an app's modules) out of every later GC pass (``gc.freeze``); measured in the
    detokenizer: ~1.5x more request-steps per second on Qwen3. ``thresholds`` also sets
    ``gc.set_threshold``."""
    gc.collect()
    gc.freeze()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
