"""Which detokenizer shard owns a request: the one routing function of ``--detokenizers N``.

Owns :func:`shard_of`, used by every party that must agree on a request's owner: the
tokenizer workers (which shard's ``detok-in`` gets the ``Submit``), the clients (which shard's
``detok-front`` gets ``Abort`` / ``Query``), and ``EngineLink`` (which shard's ``engine-out``
gets the request's step outputs). It is a pure function of the request id the engine sees and
the shard count, stable across processes, machines and Python versions (CRC-32 of the UTF-8
id, mixed; not ``hash()``, which is salted per process). Imports only the standard library, so an
engine can import it without the rest of textproc.

Sub-requests of ``n`` > 1 (``<id>-<i>``) shard by their own id, like any request: ids are not
parsed (a client's own ids contain ``-`` too), and the worker sends a constraint table to each
shard one of them lands on.
"""

from __future__ import annotations

from collections.abc import Iterable
from zlib import crc32

__all__ = ["shard_of", "group_by_shard", "MAX_DETOKENIZERS"]

MAX_DETOKENIZERS = 64  # detokenizer shards one service may run
_GOLDEN = 0x9E3779B1  # 2**32 / golden ratio, odd


def shard_of(request_id: str, n_shards: int) -> int:
    """The shard (0..n_shards-1) that owns ``request_id``; always 0 for one shard.

    >>> shard_of("r1", 1), shard_of("r1", 2), shard_of("r4", 2)
    (0, 0, 1)
    """
    if n_shards == 1:
        return 0
    # CRC-32 is linear: ids that differ only in their last characters ("<id>-0", "<id>-1", ...)
    # share its low bits, so take the high bits of a multiplicative (Fibonacci) mix instead
    mixed = (crc32(request_id.encode("utf-8", "surrogatepass")) * _GOLDEN) & 0xFFFFFFFF
    return (mixed >> 16) % n_shards


def group_by_shard(request_ids: Iterable[str], n_shards: int) -> dict[int, list[str]]:
    """``request_ids`` by owner shard, each list in the given order; only shards that own one.

    >>> group_by_shard(["r1", "r4", "r2"], 2)
    {0: ['r1', 'r2'], 1: ['r4']}
    """
    out: dict[int, list[str]] = {}
    for rid in request_ids:
        out.setdefault(shard_of(rid, n_shards), []).append(rid)
    return out
