"""The compiled constraint: :class:`TokenIndex`, per state the allowed ids and where each goes.

Semantics (outlines-core's ``Index``): a token is allowed in a state iff walking its bytes
from there never reaches the dead state; the end ids are allowed exactly in accepting states.
:mod:`textproc.core.constraints.index.build` makes one from a byte DFA and a vocabulary.

Layout: per state a full bitmask (ceil(V/32) little-endian int32 words, shared between
states with equal masks), a default next state and a small exception map id -> next state.
A state of a counted repetition (``[^"]{0,40}``: a token of n characters goes n states on, or
n - 3 after ``\\u``) has instead of the default a row "next state by character count", indexed by the token's
character count (one byte per id, ``char_count``), so its ~150k tokens need no exception
entries. A lookup is two indexings and a dict get (plus one indexing in such a state); nothing here compiles or needs the vocabulary, so
this is what an engine's process holds (``pack`` / ``unpack`` are the wire form).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence

from textproc.core.constraints.index.vocab import MAX_CHARS, bits_of

__all__ = ["TokenIndex", "BY_CHARS_WIDTH"]

BY_CHARS_WIDTH = MAX_CHARS + 1  # a "next state by character count" row: counts 0..MAX_CHARS


class TokenIndex:
    """A compiled constraint: states, the allowed ids per state, and next states.

    ``allowed_mask(state)`` is ``ceil(V / 32)`` little-endian int32 words (bit ``i % 32`` of
    word ``i // 32`` set iff id ``i`` is allowed), the layout GPU mask kernels take. End ids
    are allowed exactly where ``is_accepting(state)``; ``next_state`` of an end id is the
    state itself, of a disallowed id -1.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        end_ids: Iterable[int],
        masks: list[bytes],
        mask_of: list[int],
        default_next: list[int],
        exceptions: Sequence[dict[int, int] | None],
        accepting: list[bool],
        steer: list[int] | None = None,
        distance: list[int] | None = None,
        key: str = "",
        by_chars: list[list[int] | None] | None = None,
        char_count: bytes = b"",
        n_known: int = 0,
        exc_arrays: tuple[array[int], array[int], array[int]] | None = None,
    ) -> None:
        self.vocab_size = vocab_size
        self.end_ids = tuple(end_ids)
        self._ends = frozenset(self.end_ids)
        self._masks = masks
        self._mask_of = mask_of
        self._default = default_next
        # state -> {id: next state}; an unpacked index builds a state's dict on first use
        # from ``exc_arrays`` (ids, next states, per-state offsets), so an engine taking a large
        # index does not build hundreds of thousands of dict entries for states never walked
        self._exc: list[dict[int, int] | None] = list(exceptions)
        self._exc_arrays = exc_arrays
        self._accepting = accepting
        self._steer = steer if steer is not None else [-1] * len(mask_of)
        self._distance = distance if distance is not None else [0] * len(mask_of)
        self.key = key
        # state -> next state by the token's character count (counted repetitions) or None
        self._by_chars = by_chars if by_chars is not None else [None] * len(mask_of)
        self._char_count = char_count  # id -> characters, clipped at MAX_CHARS (b"": unused)
        self._counts: list[int] = [-1] * len(masks)  # mask -> allowed ids, computed on demand
        # a partial index (the first states of a progressive compile) numbers n_known states
        # but has tables for the first n_states only; 0: complete
        self.n_known = n_known if n_known > len(mask_of) else 0
        self.successor: TokenIndex | None = None  # the whole index, once it arrives

    initial_state = 0

    @property
    def n_states(self) -> int:
        """States with tables (a partial index's transitions may name up to ``n_known``)."""
        return len(self._mask_of)

    @property
    def partial(self) -> bool:
        """The first states of an index only: a walk may reach a state past ``n_states``
        (no mask yet), and no shortest completion is known; the whole index (``successor``)
        numbers its states its own way, so a walk moves onto it by replaying its tokens."""
        return self.n_known > 0

    @property
    def nbytes(self) -> int:
        """Bytes of the packed index (what travels to the engine once)."""
        rows = sum(BY_CHARS_WIDTH for row in self._by_chars if row is not None)
        n_exc = len(self._exc_arrays[0]) if self._exc_arrays is not None else sum(
            len(exc) for exc in self._exc if exc is not None)
        return (sum(map(len, self._masks)) + 16 * self.n_states + 8 * n_exc
                + 4 * rows + len(self._char_count))

    def is_accepting(self, state: int) -> bool:
        return self._accepting[state]

    def completion_token(self, state: int) -> int:
        """An allowed id on a shortest way (in tokens) to an accepting state; -1 if accepting."""
        return self._steer[state]

    def completion_length(self, state: int) -> int:
        """How many tokens the shortest way from ``state`` to an accepting state takes."""
        return self._distance[state]

    def allowed_mask(self, state: int) -> bytes:
        return self._masks[self._mask_of[state]]

    def allowed_count(self, state: int) -> int:
        """How many ids are allowed (end ids included)."""
        m = self._mask_of[state]
        count = self._counts[m]
        if count < 0:
            count = self._counts[m] = int.from_bytes(self._masks[m], "little").bit_count()
        return count

    def allowed_ids(self, state: int) -> list[int]:
        """Sorted allowed ids (the end ids included iff the state is accepting)."""
        return bits_of(int.from_bytes(self._masks[self._mask_of[state]], "little"))

    def next_state(self, state: int, token_id: int) -> int:
        mask = self._masks[self._mask_of[state]]
        if not 0 <= token_id < self.vocab_size or not mask[token_id >> 3] >> (token_id & 7) & 1:
            return -1
        if token_id in self._ends:
            return state
        exc = self._exc[state]
        if exc is None:
            exc = self._exceptions(state)
        got = exc.get(token_id)
        if got is not None:
            return got
        row = self._by_chars[state]
        return self._default[state] if row is None else row[self._char_count[token_id]]

    def transitions(self, state: int) -> tuple[int, dict[int, int]]:
        """``(default next state, {id: next state} exceptions)``: an allowed id goes to its
        exception's state, else to the default (-1 when every allowed id is an exception)."""
        exc = self._exc[state]
        return self._default[state], exc if exc is not None else self._exceptions(state)

    def _exceptions(self, state: int) -> dict[int, int]:
        """``state``'s exceptions, built from the packed arrays on first use."""
        assert self._exc_arrays is not None
        ids, nexts, offsets = self._exc_arrays
        start, end = offsets[state], offsets[state + 1]
        exc = self._exc[state] = dict(zip(ids[start:end], nexts[start:end]))
        return exc

    # -- packing (the engine-side copy is rebuilt from these, no vocabulary needed) -----------

    def pack(self) -> dict[str, bytes | int | list[int]]:
        """Plain fields for a wire frame: masks, per-state arrays and exceptions, int32 LE."""
        if self._exc_arrays is not None:  # unpacked: the arrays it came with
            ids_array, nexts_array, offsets_array = self._exc_arrays
            exc_ids, exc_next, offsets = ids_array.tobytes(), nexts_array.tobytes(), offsets_array.tobytes()
        else:
            ids: list[int] = []
            nexts: list[int] = []
            ends = [0]
            for exc in self._exc:
                assert exc is not None
                keys = sorted(exc)
                ids += keys
                nexts += map(exc.__getitem__, keys)
                ends.append(len(ids))
            # (struct packs a list twice as fast as array() converts it, item by item)
            exc_ids = struct.pack(f"<{len(ids)}i", *ids)
            exc_next = struct.pack(f"<{len(nexts)}i", *nexts)
            offsets = struct.pack(f"<{len(ends)}i", *ends)
        return {
            "vocab_size": self.vocab_size,
            "end_ids": list(self.end_ids),
            "masks": b"".join(self._masks),
            "mask_of": array("i", self._mask_of).tobytes(),
            "default_next": array("i", self._default).tobytes(),
            "accepting": bytes(self._accepting),
            "exc_offsets": offsets,
            "exc_ids": exc_ids,
            "exc_next": exc_next,
            "steer": array("i", self._steer).tobytes(),
            "distance": array("i", self._distance).tobytes(),
            "n_known": self.n_known,
            **self._pack_by_chars(),
        }

    def _pack_by_chars(self) -> dict[str, bytes]:
        if all(row is None for row in self._by_chars):
            return {"char_count": b"", "by_chars_of": b"", "by_chars_next": b""}
        of, rows = array("i"), array("i")
        for row in self._by_chars:
            if row is None:
                of.append(-1)
            else:
                of.append(len(rows) // BY_CHARS_WIDTH)
                rows.extend(row)
        return {"char_count": self._char_count, "by_chars_of": of.tobytes(), "by_chars_next": rows.tobytes()}

    @classmethod
    def unpack(cls, *, key: str, vocab_size: int, end_ids: list[int], masks: bytes, mask_of: bytes,
               default_next: bytes, accepting: bytes, exc_offsets: bytes, exc_ids: bytes,
               exc_next: bytes, steer: bytes, distance: bytes, char_count: bytes = b"",
               by_chars_of: bytes = b"", by_chars_next: bytes = b"", n_known: int = 0) -> TokenIndex:
        """Inverse of :meth:`pack` (table copies only: no compile, no vocabulary); ValueError
        naming the field when the tables do not fit together."""
        width = (vocab_size + 31) // 32 * 4
        n = len(accepting)
        known = max(n, n_known)  # the states a transition may name
        for name, data, count in (("mask_of", mask_of, n), ("default_next", default_next, n),
                                  ("steer", steer, n), ("distance", distance, n),
                                  ("exc_offsets", exc_offsets, n + 1), ("exc_next", exc_next, len(exc_ids) // 4)):
            if len(data) != 4 * count:
                raise ValueError(f"index {key!r}: {name} has {len(data)} bytes, expected {4 * count}")
        if vocab_size < 0 or not masks or len(masks) % width or len(exc_ids) % 4 or n == 0:
            raise ValueError(f"index {key!r}: masks of {len(masks)} bytes for vocab_size {vocab_size}")
        mask_list = [masks[i : i + width] for i in range(0, len(masks), width)]
        ids, nexts, offsets = array("i"), array("i"), array("i")
        ids.frombytes(exc_ids)
        nexts.frombytes(exc_next)
        offsets.frombytes(exc_offsets)
        mask_index = array("i")
        mask_index.frombytes(mask_of)
        defaults, steer_ids, distances = array("i"), array("i"), array("i")
        defaults.frombytes(default_next)
        steer_ids.frombytes(steer)
        distances.frombytes(distance)
        n_masks = len(masks) // width
        # (min / max in C: the exception arrays run to hundreds of thousands of entries)
        if (offsets[0] != 0 or offsets[-1] != len(ids) or any(a > b for a, b in zip(offsets, offsets[1:]))
                or not 0 <= min(mask_index) <= max(mask_index) < n_masks
                or not -1 <= min(defaults) <= max(defaults) < known
                or not _all_below(exc_next, known) or not _all_below(exc_ids, vocab_size)
                or any(not 0 <= e < vocab_size for e in end_ids)):
            raise ValueError(f"index {key!r}: offsets, mask numbers, ids or states out of range")
        by_chars = _unpack_by_chars(key, n, known, vocab_size, char_count, by_chars_of, by_chars_next)
        exc: list[None] = [None] * n
        return cls(vocab_size=vocab_size, end_ids=end_ids, masks=mask_list, mask_of=list(mask_index),
                   default_next=list(defaults), exceptions=exc, exc_arrays=(ids, nexts, offsets),
                   accepting=[bool(a) for a in accepting],
                   steer=list(steer_ids), distance=list(distances), key=key, by_chars=by_chars,
                   char_count=char_count, n_known=n_known)


def _all_below(data: bytes, bound: int) -> bool:
    """Whether every int32 in ``data`` is in ``0 .. bound - 1``: one pass over them read as
    unsigned (a negative one reads as 2**31 or more)."""
    return not data or max(memoryview(data).cast("I")) < bound


def _unpack_by_chars(key: str, n: int, known: int, vocab_size: int, char_count: bytes, by_chars_of: bytes,
                     by_chars_next: bytes) -> list[list[int] | None] | None:
    """The per-state "next state by character count" rows of a packed index (None: none)."""
    if not by_chars_of and not by_chars_next and not char_count:
        return None
    of, rows = array("i"), array("i")
    if len(by_chars_of) != 4 * n or len(by_chars_next) % (4 * BY_CHARS_WIDTH) or len(char_count) != vocab_size:
        raise ValueError(f"index {key!r}: by_chars tables of {len(by_chars_of)} / {len(by_chars_next)} / "
                         f"{len(char_count)} bytes do not fit {n} states and vocab_size {vocab_size}")
    of.frombytes(by_chars_of)
    rows.frombytes(by_chars_next)
    n_rows = len(rows) // BY_CHARS_WIDTH
    if ((of and not -1 <= min(of) <= max(of) < n_rows) or (rows and not -1 <= min(rows) <= max(rows) < known)
            or (char_count and max(char_count) >= BY_CHARS_WIDTH)):
        raise ValueError(f"index {key!r}: by_chars rows, states or character counts out of range")
    return [None if r < 0 else list(rows[r * BY_CHARS_WIDTH : (r + 1) * BY_CHARS_WIDTH]) for r in of]
