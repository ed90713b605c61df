"""What an engine sends: step entries and columns checked and packed into step frames.

Owns the entry shapes ``send_outputs`` takes (``StepEntry``), the step formats
(``StepFormat``), the finish reasons an engine may give (``FINISH_REASONS``, from the
protocol's ``ENGINE_FINISH_REASONS``) and the checks that name a bad entry or column.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Mapping, Sequence
from itertools import chain, compress
from typing import Any, Literal, Union

from textproc.engine.requests import unpack_array
from textproc.errors import InvalidInput, short
from textproc.protocol import ENGINE_FINISH_REASONS, EngineStepPacked, StepOutput, logprob_rows

__all__ = ["StepEntry", "StepFormat", "STEP_FORMATS", "PACKED_TAG", "NO_FINISHED", "NO_CACHED",
           "FINISH_REASONS", "normalise", "columns", "pack", "pack_logprobs", "check_columns",
           "check_logprobs", "check_cached"]

_BIG_ENDIAN = array("I", [1]).tobytes()[0] == 0

# (request_id, new_token_ids) or (request_id, new_token_ids, finish_reason): the 3-tuple encodes
# to the bytes of StepOutput(request_id, token_ids, finish_reason) without its trailing logprob
# fields, which decode to None; the 2-tuple also omits the reason (None). With logprobs
# (protocol 8): (request_id, new_token_ids, finish_reason, logprobs, top_ids), logprobs 1 + k
# floats per new id (the sampled id's, then the k alternatives'), top_ids k ids per new id.
StepEntry = Union[
    tuple[str, Sequence[int]],
    tuple[str, Sequence[int], Union[str, None]],
    tuple[str, Sequence[int], Union[str, None], Any, Any],
    StepOutput,
]


# which frame send_step / send_outputs send: "auto" (default): send_step EngineStepPacked,
# send_outputs EngineStep (each the cheapest for its input); "packed": EngineStepPacked
# (protocol 2) from both; "legacy": EngineStep (protocol 1) from both
StepFormat = Literal["auto", "packed", "legacy"]
STEP_FORMATS = ("auto", "packed", "legacy")
PACKED_TAG = EngineStepPacked.__name__
NO_FINISHED: dict[int, str] = {}
NO_CACHED: dict[str, int] = {}  # a step's cached_tokens when it gives none (never mutated)


FINISH_REASONS = frozenset({None, *ENGINE_FINISH_REASONS})  # None: the request goes on


def normalise(outputs: Sequence[Any]) -> list[Any]:
    """Entries checked, id sequences turned into lists of ints, logprobs packed; a bad entry is
    named."""
    fixed: list[Any] = []
    for index, entry in enumerate(outputs):
        logprobs: Any = b""
        top_ids: Any = b""
        try:
            if isinstance(entry, StepOutput):
                request_id, token_ids, reason = entry.request_id, entry.token_ids, entry.finish_reason
                logprobs, top_ids = entry.logprobs or b"", entry.top_ids or b""
            elif isinstance(entry, (tuple, list)) and len(entry) in (2, 3, 5):
                request_id, token_ids = entry[0], entry[1]
                reason = entry[2] if len(entry) >= 3 else None
                if len(entry) == 5:
                    logprobs, top_ids = entry[3], entry[4]
                    logprobs = b"" if logprobs is None else logprobs
                    top_ids = b"" if top_ids is None else top_ids
            else:
                raise TypeError("not a 2-, 3- or 5-tuple")
            if not isinstance(request_id, str) or reason not in FINISH_REASONS:
                raise TypeError("bad request_id or finish_reason")
            ids = [operator.index(token_id) for token_id in token_ids]
            if any(token_id < 0 or token_id >= 2**32 for token_id in ids):
                raise ValueError("token id out of uint32 range")
            if len(logprobs) or len(top_ids):
                logprobs = pack_logprobs(logprobs, f"send_outputs entry {index} logprobs")
                top_ids = pack(top_ids, f"send_outputs entry {index} top_ids")
                logprob_rows(len(ids), logprobs, top_ids, f"send_outputs entry {index}")
        except (TypeError, ValueError, InvalidInput) as exc:
            raise InvalidInput(
                f"send_outputs entry {index} is {short(entry)}; expected (request_id: str, "
                f"token_ids: list[int], finish_reason: one of None, 'stop', 'length', 'abort', "
                f"'error'[, logprobs: 1 + k floats per id, top_ids: k ids per id]): {exc}"
            ) from exc
        if len(logprobs):
            fixed.append((request_id, ids, reason, logprobs, top_ids))
        else:
            fixed.append((request_id, ids, reason))
    return fixed


def columns(outputs: Sequence[Any]) -> tuple[Sequence[str], bytes, bytes, Mapping[int, str]]:
    """Step entries as EngineStepPacked columns, iterating in C only (zip, map, array).

    Raises TypeError / ValueError / OverflowError for entries it cannot take as they are
    (``StepOutput``, mixed 2- and 3-tuples, ids that are not uint32); the caller then
    normalises them (and names a bad one).
    """
    n = len(outputs)
    if not n:
        return (), b"", b"", NO_FINISHED
    cols = list(zip(*outputs, strict=True))
    if len(cols) == 3:
        request_ids, ids, reasons = cols
    elif len(cols) == 2:
        request_ids, ids = cols
        reasons = ()
    else:
        raise TypeError("entries are not 2- or 3-tuples")
    lengths = array("I", map(len, ids))
    tokens = array("I", chain.from_iterable(ids))
    if _BIG_ENDIAN:
        lengths.byteswap()
        tokens.byteswap()
    counts = b"" if lengths.count(1) == n else lengths.tobytes()
    finished: Mapping[int, str] = NO_FINISHED
    if reasons and reasons.count(None) != n:
        finished = dict(zip(compress(range(n), reasons), filter(None, reasons)))
    return request_ids, tokens.tobytes(), counts, finished


def pack(values: Any, what: str) -> bytes:
    """Little-endian uint32 bytes of ``values`` (bytes are taken as already packed)."""
    return _pack(values, f"send_step: {what}", "I", ("I", "L"), "token ids are little-endian "
                 "uint32", "uint32 ids: array('I'), a numpy uint32 array, packed bytes or a "
                 "sequence of ints in [0, 2**32)")


def pack_logprobs(values: Any, what: str) -> bytes:
    """Little-endian float32 bytes of ``values`` (array('f'), numpy float32, packed bytes, or
    a sequence of floats)."""
    return _pack(values, what, "f", ("f",), "logprobs are little-endian float32",
                 "float32 logprobs: array('f'), a numpy float32 array, packed bytes or a "
                 "sequence of floats")


def _pack(values: Any, what: str, code: str, codes: tuple[str, ...], packed_as: str,
          expected: str) -> bytes:
    # 4-byte items of type ``code``: a contiguous buffer of them (1-D, or a (rows, k) matrix)
    # is taken as it is on a little-endian machine, bytes as already packed, the rest converted
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None and view.ndim in (1, 2) and view.c_contiguous:
        if view.format in ("B", "b", "c") and view.itemsize == 1 and view.ndim == 1:
            if len(view) % 4:
                raise InvalidInput(f"{what} given as {len(view)} bytes; packed {packed_as}, "
                                   f"a multiple of 4 bytes")
            return view.tobytes()
        if view.itemsize == 4 and view.format.lstrip("@=<") in codes:
            if view.format.startswith("<") or not _BIG_ENDIAN:
                return view.tobytes()
        if view.ndim == 2:  # a (tokens, k) matrix: its items in row order
            values = view.cast("B").cast(view.format.lstrip("@=<"))  # type: ignore[call-overload]
    try:
        packed = array(code, values)
    except (TypeError, OverflowError, ValueError) as exc:
        raise InvalidInput(f"{what} is {short(values)}; expected {expected}") from exc
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def check_logprobs(n_tokens: int, logprobs: bytes, top_ids: bytes, what: str) -> None:
    """InvalidInput unless ``logprobs`` holds 1 + k floats and ``top_ids`` k ids per new id."""
    try:
        logprob_rows(n_tokens, logprobs, top_ids, what)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def check_cached(cached_tokens: Mapping[str, int], what: str) -> None:
    """InvalidInput unless ``cached_tokens`` maps request ids (str) to counts (int >= 0)."""
    for rid, count in cached_tokens.items():
        if not isinstance(rid, str) or isinstance(count, bool) or not isinstance(count, int) \
                or count < 0:
            raise InvalidInput(f"{what}: cached_tokens entry {short(rid)}: {short(count)}; "
                               "expected a request id (str) and a count of prompt tokens (int >= 0)")


def check_columns(
    request_ids: Sequence[str], n_tokens: int, counts: bytes, finished: Mapping[int, str]
) -> None:
    n = len(request_ids)
    for index, rid in enumerate(request_ids):
        if not isinstance(rid, str):
            raise InvalidInput(f"send_step: request_ids[{index}] is {short(rid)}; expected str")
    if counts:
        total = sum(unpack_array(counts))
        if total != n_tokens:
            raise InvalidInput(
                f"send_step: counts sum to {total} but token_ids holds {n_tokens} ids"
            )
    for index, reason in finished.items():
        if not isinstance(index, int) or not 0 <= index < n or reason not in FINISH_REASONS:
            raise InvalidInput(
                f"send_step: finished entry {short(index)}: {short(reason)}; expected an index "
                f"into the {n} request_ids and one of 'stop', 'length', 'abort', 'error'"
            )
