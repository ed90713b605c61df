"""Per-token logprob entries of one request's output, released in step with its text.

Owns turning the engine's numbers (per new token: its logprob and k alternatives as ids and
logprobs) into entries that carry each token's exact bytes, and the rule for which tokens a
request's output shows: a token gets an entry once all of its bytes are in the text after stop
strings (``OutputPipeline.unreleased_bytes`` says how far that is), so the entries of a stream
come out with the text they belong to and their bytes concatenate to that text.

The rules (docs/architecture.md, "Logprobs"):

* a token that adds no bytes (a skipped special token such as EOS) has no entry;
* a token cut by a stop string keeps only its bytes before the cut (its logprob and
  alternatives unchanged); tokens wholly past the cut have no entry;
* a token whose bytes are not valid UTF-8 by themselves keeps its exact bytes (so a character
  split across tokens joins again); :func:`token_text` spells its text ``bytes:\\xNN`` as OpenAI;
* alternatives carry their own bytes, special tokens spelled out.

Pure: no I/O, no process code; O(new tokens x k) per step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

__all__ = ["Entry", "LogprobTrack", "token_text", "MISSING_LOGPROB"]

# (token id, its bytes in the output, its logprob, then its k alternatives as three columns:
# ids, bytes (special tokens spelled out), logprobs; most likely first). Columns, not k
# tuples: half the cost to build, encode and decode (bench/README.md, "Logprobs")
Entry = tuple[int, bytes, float, list[int], list[bytes], list[float]]
# the columns of an entry without alternatives (shared; never mutated)
_NO_IDS: list[int] = []
_NO_BYTES: list[bytes] = []
_NO_FLOATS: list[float] = []
# the logprob of a token the engine sent no row for (OpenAI's "very unlikely" value)
MISSING_LOGPROB = -9999.0


def token_text(data: bytes) -> str:
    """A token's text in logprobs: its bytes as UTF-8, or, when they are not valid UTF-8 by
    themselves (a token that starts or ends inside a character), ``"bytes:"`` and the bytes
    with every invalid one written ``\\xNN`` (OpenAI's spelling; vLLM writes U+FFFD instead).

    >>> token_text(b" caf"), token_text(b"\\xe4\\xbd"), token_text(b"a\\xe4")
    (' caf', 'bytes:\\\\xe4\\\\xbd', 'bytes:a\\\\xe4')
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + data.decode("utf-8", "backslashreplace")


class LogprobTrack:
    """One request's pending entries: ``feed`` the engine's rows, ``release`` what is out.

    ``table`` maps a token id to the bytes it adds to the output (the pipeline's
    ``byte_table``), ``alt_table`` to the bytes an alternative is shown with; ``top_n`` is how
    many alternatives the request wants (the engine may send more; fewer if it sends fewer).

    >>> t = LogprobTrack([b"", b"ab", b"c"], [b"<s>", b"ab", b"c"], 1)
    >>> t.feed([1, 0, 2], [-0.5, -0.1, -1.0, -2.0, -0.25, -0.25], [2, 0, 2], 2)
    >>> t.release(1)  # one byte still held: only "ab" is out
    [(1, b'ab', -0.5, [2], [b'c'], [-0.1])]
    >>> t.release(0, final=True)
    [(2, b'c', -0.25, [2], [b'c'], [-0.25])]
    """

    __slots__ = ("_table", "_alt_table", "_k", "_pending", "_fed", "_out", "missing")

    def __init__(self, table: Sequence[bytes], alt_table: Sequence[bytes], top_n: int) -> None:
        self._table = table
        self._alt_table = alt_table
        self._k = top_n
        self._pending: deque[Entry] = deque()
        self._fed = 0  # bytes of every fed token
        self._out = 0  # bytes of the tokens released
        self.missing = 0  # tokens fed without a row from the engine

    def feed(self, token_ids: Sequence[int], floats: Sequence[float] | None,
             alt_ids: Sequence[int] = (), width: int = 1, row: int = 0) -> None:
        """Queue entries for ``token_ids``; their rows start at ``row`` in ``floats`` (``width``
        = 1 + k floats per token: its logprob, then its alternatives') and ``alt_ids`` (k per
        token), both lists (slices of them are the entries' columns). ``floats=None``: the
        engine sent no rows (entries get ``MISSING_LOGPROB``)."""
        table, alt_bytes = self._table, self._alt_table.__getitem__
        k = self._k if self._k < width else width - 1
        pending = self._pending
        for j, token_id in enumerate(token_ids):
            try:
                data = table[token_id] if token_id >= 0 else b""
            except IndexError:  # an id the pipeline refuses (the request fails there)
                data = b""
            if not data:
                continue  # adds nothing to the text
            self._fed += len(data)
            if floats is None:
                self.missing += 1
                pending.append((token_id, data, MISSING_LOGPROB, _NO_IDS, _NO_BYTES, _NO_FLOATS))
                continue
            base = (row + j) * width
            if not k:
                pending.append((token_id, data, floats[base], _NO_IDS, _NO_BYTES, _NO_FLOATS))
                continue
            first = (row + j) * (width - 1)
            ids_k = alt_ids[first:first + k]  # a list: the entry's column as it is
            try:  # C-level map; wire ids are uint32, so only an id past the table fails
                texts = list(map(alt_bytes, ids_k))
            except IndexError:
                n_alt = len(self._alt_table)
                texts = [self._alt_table[a] if a < n_alt else b"" for a in ids_k]
            pending.append((token_id, data, floats[base], ids_k, texts,  # type: ignore[arg-type]
                            floats[base + 1:base + 1 + k]))

    def release(self, unreleased_bytes: int, *, final: bool = False) -> list[Entry]:
        """The entries whose bytes are all out now that ``unreleased_bytes`` of the fed bytes
        are not; ``final`` (the output ended): also the token the end cuts, with its bytes
        before the cut, and nothing after."""
        target = self._fed - unreleased_bytes
        pending = self._pending
        if target == self._fed:  # nothing held (the common case): everything pending is out
            out = list(pending)
            pending.clear()
            self._out = target
            return out
        out = []
        while pending and self._out + len(pending[0][1]) <= target:
            entry = pending.popleft()
            self._out += len(entry[1])
            out.append(entry)
        if final and pending:
            if self._out < target:
                token_id, data, *rest = pending[0]
                out.append((token_id, data[:target - self._out], *rest))  # type: ignore[arg-type]
                self._out = target
            pending.clear()
        return out
