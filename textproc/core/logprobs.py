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

# (token id, its bytes in the output, its logprob, [(alternative id, its bytes, logprob), ...])
Entry = tuple[int, bytes, float, list[tuple[int, bytes, float]]]
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
    >>> t.feed([1, 0, 2], [-0.5, -0.1, -1.0, -2.0, -0.25, -0.25], [2, 1, 2], 2)
    >>> t.release(1)  # one byte still held: only "ab" is out
    [(1, b'ab', -0.5, [(2, b'c', -0.1)])]
    >>> t.release(0, final=True)
    [(2, b'c', -0.25, [(2, b'c', -0.25)])]
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
        token). ``floats=None``: the engine sent no rows (entries get ``MISSING_LOGPROB``)."""
        if len(token_ids) == 1 and floats is not None:  # the common step: one new id
            token_id = token_ids[0]
            try:
                data = self._table[token_id] if token_id >= 0 else b""
            except IndexError:
                data = b""
            if data:
                self._fed += len(data)
                base = row * width
                k = self._k if self._k < width else width - 1
                if k:
                    first = row * (width - 1)
                    ids_k = alt_ids[first:first + k]
                    try:
                        alts = list(zip(ids_k, map(self._alt_table.__getitem__, ids_k),
                                        floats[base + 1:base + 1 + k]))
                    except (IndexError, TypeError):
                        alts = self._alts(ids_k, floats[base + 1:base + 1 + k])
                    self._pending.append((token_id, data, floats[base], alts))
                else:
                    self._pending.append((token_id, data, floats[base], []))
            return
        table, alt_table = self._table, self._alt_table
        n_table = len(table)
        k = min(self._k, width - 1)
        pending = self._pending
        for j, token_id in enumerate(token_ids):
            data = table[token_id] if 0 <= token_id < n_table else b""
            if not data:
                continue  # adds nothing to the text (or is an id the pipeline refuses)
            self._fed += len(data)
            if floats is None:
                self.missing += 1
                pending.append((token_id, data, MISSING_LOGPROB, []))
                continue
            r = row + j
            base = r * width + 1
            alts = []
            if k:
                first = r * (width - 1)
                ids_k = alt_ids[first:first + k]
                try:  # C-level zip/map; ids from the wire are uint32, so only too large fails
                    alts = list(zip(ids_k, map(alt_table.__getitem__, ids_k),
                                    floats[base:base + k]))
                except (IndexError, TypeError):
                    alts = self._alts(ids_k, floats[base:base + k])
            pending.append((token_id, data, floats[base - 1], alts))

    def _alts(self, ids: Sequence[int], floats: Sequence[float]) -> list[tuple[int, bytes, float]]:
        # an alternative id outside the vocabulary is shown with no bytes
        n_alt = len(self._alt_table)
        return [(a, self._alt_table[a] if 0 <= a < n_alt else b"", f) for a, f in zip(ids, floats)]

    def release(self, unreleased_bytes: int, *, final: bool = False) -> list[Entry]:
        """The entries whose bytes are all out now that ``unreleased_bytes`` of the fed bytes
        are not; ``final`` (the output ended): also the token the end cuts, with its bytes
        before the cut, and nothing after."""
        target = self._fed - unreleased_bytes
        pending = self._pending
        out: list[Entry] = []
        while pending and self._out + len(pending[0][1]) <= target:
            entry = pending.popleft()
            self._out += len(entry[1])
            out.append(entry)
        if final and pending:
            if self._out < target:
                token_id, data, logprob, alts = pending[0]
                out.append((token_id, data[:target - self._out], logprob, alts))
                self._out = target
            pending.clear()
        return out
