"""Logprobs in the detokenizer: an engine step's logprob rows per request, tracks, entries out.

Owns the translation between the wire (``EngineStepPacked.logprobs`` / ``top_ids`` columns,
``StepOutput.logprobs`` / ``top_ids`` rows, ``RequestOutput.logprobs``) and the text core's
:class:`textproc.core.logprobs.LogprobTrack`. The request table calls it only for steps that
carry logprobs or while a request that wants them is live, so requests without logprobs pay
nothing. Rows that do not fit their ids raise ValueError (the whole step is malformed).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from textproc.core.detokenizer import DetokenizerVocab, special_byte_table
from textproc.core.logprobs import Entry, LogprobTrack
from textproc.core.pipeline import OutputPipeline
from textproc.protocol import (
    EngineStep,
    EngineStepPacked,
    RequestOutput,
    logprob_rows,
    pack_floats,
    pack_ids,
    step_entries,
    StepOutput,
)

__all__ = ["Rows", "step_rows", "new_track", "attach", "early_output"]

_BIG_ENDIAN = array("I", [1]).tobytes()[0] == 0
# one request's rows in a step: (floats, alternative ids, width 1 + k, index of its first row)
Rows = tuple[Sequence[float], Sequence[int], int, int]


def step_rows(step: EngineStep | EngineStepPacked,
              ) -> list[tuple[str, Sequence[int], str | None, Rows | None]]:
    """``(request_id, new ids, finish reason, logprob rows or None)`` per request of a step."""
    if isinstance(step, EngineStepPacked):
        rids, ids, reasons = step_entries(step)
        if not step.logprobs and not step.top_ids:
            return [(r, i, f, None) for r, i, f in zip(rids, ids, reasons)]
        n_tokens = sum(map(len, ids))
        floats, alt_ids = step.logprobs, step.top_ids
        width, floats_s, alts_s = logprob_rows(n_tokens, floats, alt_ids,
                                               f"EngineStepPacked step {step.step}")
        floats_s = _as_list(floats_s)  # list slices and items are cheaper than array ones
        out: list[tuple[str, Sequence[int], str | None, Rows | None]] = []
        row = 0
        for rid, new, reason in zip(rids, ids, reasons):
            out.append((rid, new, reason, (floats_s, alts_s, width, row) if new else None))
            row += len(new)
        return out
    out = []
    append = out.append
    for o in step.outputs:
        row_floats, row_ids = o.logprobs, o.top_ids
        if not row_floats and not row_ids:  # None or empty: no rows
            append((o.request_id, o.token_ids, o.finish_reason, None))
            continue
        n = len(o.token_ids)
        if type(row_floats) is bytes and not row_ids and n and len(row_floats) == 4 * n:
            # k = 0, packed (the common shape): one float per id, nothing else to check
            packed = array("f")
            packed.frombytes(row_floats)
            if _BIG_ENDIAN:
                packed.byteswap()
            append((o.request_id, o.token_ids, o.finish_reason, (packed.tolist(), (), 1, 0)))
            continue
        try:
            width, floats_s, alts_s = logprob_rows(n, row_floats or b"", row_ids or b"", "rows")
        except ValueError as e:
            raise ValueError(f"EngineStep step {step.step} request {o.request_id!r}: "
                             f"{str(e).removeprefix('rows: ')}") from e
        append((o.request_id, o.token_ids, o.finish_reason, (_as_list(floats_s), alts_s, width, 0)))
    return out


def _as_list(values: Sequence[float]) -> Sequence[float]:
    tolist = getattr(values, "tolist", None)
    return tolist() if tolist is not None else values


def early_output(rid: str, ids: Sequence[int], reason: str | None, rows: Rows | None) -> StepOutput:
    """A step's part for a request not registered yet, its logprob rows cut out (buffered)."""
    if rows is None:
        return StepOutput(rid, list(ids), reason)
    floats, alt_ids, width, row = rows
    n = len(ids)
    return StepOutput(rid, list(ids), reason, pack_floats(floats[row * width:(row + n) * width]),
                      pack_ids(alt_ids[row * (width - 1):(row + n) * (width - 1)]))


def new_track(tokenizer: DetokenizerVocab, state: OutputPipeline, top_n: int) -> LogprobTrack:
    """The track of a request whose output ``state`` produces, ``top_n`` alternatives."""
    return LogprobTrack(state.byte_table, special_byte_table(tokenizer), top_n)


def attach(box: list[RequestOutput], rid: str, entries: list[Entry]) -> None:
    """Put ``entries`` on the output ``rid`` got this round, or on a new one."""
    last = box[-1] if box else None
    if last is not None and last.request_id == rid:
        last.logprobs = last.logprobs + entries if last.logprobs else entries
    else:
        box.append(RequestOutput(rid, [], logprobs=entries))
