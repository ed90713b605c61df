"""How numbers travel inside frames: token ids as packed uint32, logprobs as packed float32.

Little-endian on every host (byteswapped on a big-endian one). ``logprob_rows`` unpacks and
checks a step's logprob rows against its new ids; it raises ValueError, never trusts the sizes.
"""

from __future__ import annotations

import sys
from array import array
from typing import Sequence

__all__ = ["pack_ids", "unpack_ids", "pack_floats", "unpack_floats", "logprob_rows"]

_LITTLE = sys.byteorder == "little"


def pack_ids(token_ids: Sequence[int]) -> bytes:
    """Token ids as little-endian uint32 bytes (4 bytes per id).

    >>> unpack_ids(pack_ids([1, 151643]))
    [1, 151643]
    """
    packed = array("I", token_ids)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def pack_floats(values: Sequence[float]) -> bytes:
    """Floats as little-endian float32 bytes (4 bytes per value): how logprobs travel."""
    packed = array("f", values)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def unpack_ids(data: bytes) -> list[int]:
    """Inverse of ``pack_ids``; raises ValueError when ``len(data)`` is not a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"packed token ids must be a multiple of 4 bytes, got {len(data)}")
    packed = array("I")
    packed.frombytes(data)
    if not _LITTLE:
        packed.byteswap()
    return packed.tolist()


def unpack_floats(data: bytes) -> list[float]:
    """Inverse of ``pack_floats``; raises ValueError when ``len(data)`` is not a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"packed float32 values must be a multiple of 4 bytes, got {len(data)}")
    packed = array("f")
    packed.frombytes(data)
    if not _LITTLE:
        packed.byteswap()
    return packed.tolist()


def logprob_rows(
    n_tokens: int, logprobs: bytes | Sequence[float], top_ids: bytes | Sequence[int], where: str
) -> tuple[int, Sequence[float], Sequence[int]]:
    """``(row width 1 + k, floats, alternative ids)`` of a step's (or StepOutput's) logprobs.

    Raises ValueError naming ``where`` when they do not fit ``n_tokens`` new ids: not whole
    float32 / uint32 values, a float count that is not a multiple of ``n_tokens``, or not k
    alternative ids per row.
    """
    if isinstance(logprobs, bytes):
        if len(logprobs) % 4:
            raise ValueError(f"{where}: logprobs must be packed float32 (a multiple of 4 bytes), "
                             f"got {len(logprobs)} bytes")
        packed = array("f")
        packed.frombytes(logprobs)
        if not _LITTLE:
            packed.byteswap()
        floats: Sequence[float] = packed
    else:
        floats = logprobs
    if isinstance(top_ids, bytes):
        try:
            ids: Sequence[int] = unpack_ids(top_ids)
        except ValueError as e:
            raise ValueError(f"{where}: top_ids: {e}") from e
    else:
        ids = top_ids
    if not n_tokens or not floats or len(floats) % n_tokens:
        raise ValueError(f"{where}: {len(floats)} logprobs for {n_tokens} new ids; expected "
                         f"1 + k per id")
    width = len(floats) // n_tokens
    if len(ids) != n_tokens * (width - 1):
        raise ValueError(f"{where}: {len(ids)} top_ids for {n_tokens} new ids with {width - 1} "
                         f"alternatives each; expected {n_tokens * (width - 1)}")
    return width, floats, ids

