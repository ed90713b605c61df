"""Conversion of tiktoken-format rank files into Hugging Face tokenizer.json dicts.

Three pure functions, used by ``Tokenizer.from_tiktoken`` and by
``scripts/fetch_fixtures.py``:

- :func:`load_tiktoken_ranks` reads a ``.tiktoken`` file (``base64-token rank`` per line);
- :func:`ranks_to_merges` derives BPE merges from ranks: the merge for each multi-byte token
  is the pair that BPE over strictly lower ranks produces for its bytes;
- :func:`tiktoken_to_tokenizer_json` builds the tokenizer.json dict (byte-level BPE, Split
  pre-tokenizer with the pattern + ByteLevel without regex, ByteLevel decoder, optional NFC
  normalizer, added tokens).

Tokens that BPE over lower ranks cannot reach (Llama 3 has some) get no merge; tiktoken
still emits them because it looks whole pieces up first, so the result then sets
``ignore_merges: true``, which does the same in tokenizer.json.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from textproc.errors import TokenizerFileError, short
from textproc.core.tok.bytelevel import BYTE_TO_CHAR_TABLE, CHAR_TO_BYTE

__all__ = [
    "BYTES_TO_UNICODE",
    "UNICODE_TO_BYTES",
    "bytes_to_unicode",
    "token_to_unicode",
    "load_tiktoken_ranks",
    "parse_tiktoken_ranks",
    "ranks_to_merges",
    "unreachable_tokens",
    "tiktoken_to_tokenizer_json",
]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE (a fresh copy)."""
    return dict(BYTE_TO_CHAR_TABLE)


# The one GPT-2 table lives in textproc.core.tok.bytelevel; these names are kept for callers.
BYTES_TO_UNICODE: dict[int, str] = BYTE_TO_CHAR_TABLE
UNICODE_TO_BYTES: dict[str, int] = CHAR_TO_BYTE


def token_to_unicode(token: bytes) -> str:
    """The byte-level unicode string of ``token`` (as written in tokenizer.json)."""
    return token.decode("latin-1").translate(BYTE_TO_CHAR_TABLE)


def parse_tiktoken_ranks(data: bytes, *, source: str = "<bytes>") -> dict[bytes, int]:
    """Parse the contents of a tiktoken rank file; ``source`` names it in errors."""
    ranks: dict[bytes, int] = {}
    seen_ranks: dict[int, int] = {}
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise TokenizerFileError(
                f"{source}:{lineno}: expected 'base64-token rank', "
                f"got {short(line.decode('utf-8', 'replace'))}"
            )
        token_b64, rank_text = parts
        try:
            token = base64.b64decode(token_b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise TokenizerFileError(
                f"{source}:{lineno}: token {short(token_b64.decode('utf-8', 'replace'))} "
                f"is not valid base64 ({exc})"
            ) from None
        try:
            rank = int(rank_text)
        except ValueError:
            raise TokenizerFileError(
                f"{source}:{lineno}: rank {short(rank_text.decode('utf-8', 'replace'))} "
                "is not an integer"
            ) from None
        if rank < 0:
            raise TokenizerFileError(f"{source}:{lineno}: rank {rank} is negative")
        if not token:
            raise TokenizerFileError(f"{source}:{lineno}: empty token")
        if token in ranks:
            raise TokenizerFileError(
                f"{source}:{lineno}: token {short(token)} already has rank {ranks[token]}"
            )
        if rank in seen_ranks:
            raise TokenizerFileError(
                f"{source}:{lineno}: rank {rank} already used on line {seen_ranks[rank]}"
            )
        ranks[token] = rank
        seen_ranks[rank] = lineno
    return ranks


def load_tiktoken_ranks(path: str | Path) -> dict[bytes, int]:
    """Read a tiktoken rank file: one ``base64(token) rank`` per line.

    Raises TokenizerFileError naming the file and line for malformed lines, duplicate
    tokens or ranks, and an unreadable file.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TokenizerFileError(f"cannot read tiktoken rank file {str(path)!r}: {exc}") from None
    return parse_tiktoken_ranks(data, source=str(path))


def _bpe_below(token: bytes, limit: int, ranks: Mapping[bytes, int]) -> list[bytes]:
    """BPE of ``token``'s bytes using only ranks strictly below ``limit`` (tiktoken's rule)."""
    get = ranks.get
    parts = [token[i : i + 1] for i in range(len(token))]
    # rank of each adjacent pair (``limit`` when absent or not below it)
    pair_ranks = []
    for i in range(len(parts) - 1):
        rank = get(parts[i] + parts[i + 1])
        pair_ranks.append(rank if rank is not None and rank < limit else limit)
    while pair_ranks:
        best = min(pair_ranks)
        if best >= limit:
            break
        i = pair_ranks.index(best)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        del pair_ranks[i]
        if i > 0:
            rank = get(parts[i - 1] + parts[i])
            pair_ranks[i - 1] = rank if rank is not None and rank < limit else limit
        if i < len(parts) - 1:
            rank = get(parts[i] + parts[i + 1])
            pair_ranks[i] = rank if rank is not None and rank < limit else limit
    return parts


def _split_all(
    ranks: Mapping[bytes, int],
) -> tuple[list[tuple[int, bytes, bytes]], list[bytes]]:
    for b in range(256):
        if bytes([b]) not in ranks:
            raise TokenizerFileError(
                f"rank file lacks the single byte {bytes([b])!r}; byte-level BPE needs all 256"
            )
    found: list[tuple[int, bytes, bytes]] = []
    unreachable: list[bytes] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        if len(token) == 2:  # the only pair is the token itself: never below its own rank
            found.append((rank, token[:1], token[1:]))
            continue
        parts = _bpe_below(token, rank, ranks)
        if len(parts) == 2:
            found.append((rank, parts[0], parts[1]))
        else:
            unreachable.append(token)
    found.sort()
    return found, unreachable


def ranks_to_merges(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges, in rank order, that reproduce tiktoken's ranks.

    For each multi-byte token (ascending rank) the merge is the pair that BPE over strictly
    lower ranks produces for its bytes. Tokens that this BPE cannot reach in exactly one
    final merge get no merge (see :func:`unreachable_tokens`).
    """
    found, _ = _split_all(ranks)
    return [(left, right) for _, left, right in found]


def unreachable_tokens(ranks: Mapping[bytes, int]) -> list[bytes]:
    """Multi-byte tokens that no merge over lower ranks produces (need ``ignore_merges``)."""
    _, unreachable = _split_all(ranks)
    return sorted(unreachable, key=ranks.__getitem__)


def _added_token(content: str, token_id: int, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


_ADDED_KEYS = ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _normalize_added(
    special_tokens: Mapping[str, int],
    added_tokens: Iterable[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for content, token_id in special_tokens.items():
        result[content] = _added_token(content, int(token_id), True)
    for index, entry in enumerate(added_tokens or ()):
        if "content" not in entry or "id" not in entry:
            raise TokenizerFileError(
                f"added_tokens[{index}] needs 'content' and 'id', got {short(dict(entry))}"
            )
        unknown = set(entry) - set(_ADDED_KEYS)
        if unknown:
            raise TokenizerFileError(
                f"added_tokens[{index}] has unknown keys {sorted(unknown)}; allowed: {_ADDED_KEYS}"
            )
        token = _added_token(str(entry["content"]), int(entry["id"]), bool(entry.get("special", False)))
        for key in ("single_word", "lstrip", "rstrip", "normalized"):
            if key in entry:
                token[key] = bool(entry[key])
        result[token["content"]] = token
    ids: dict[int, str] = {}
    for token in result.values():
        other = ids.get(token["id"])
        if other is not None:
            raise TokenizerFileError(
                f"added tokens {short(other)} and {short(token['content'])} share id {token['id']}"
            )
        ids[token["id"]] = token["content"]
    return sorted(result.values(), key=lambda t: int(t["id"]))


def _place_added(vocab: dict[str, int], ranks: Mapping[bytes, int],
                 added: list[dict[str, Any]]) -> None:
    """Check the added tokens against the ranks, and put them into ``vocab`` too when their
    ids do not follow the ranks consecutively (so that ``tokenizers`` keeps their ids)."""
    next_id = max(ranks.values()) + 1 if ranks else 0
    consecutive = True
    for token in added:
        if token["content"] in vocab:
            if vocab[token["content"]] != token["id"]:
                raise TokenizerFileError(
                    f"added token {short(token['content'])} has id {token['id']} but rank "
                    f"{vocab[token['content']]} in the rank file"
                )
            continue
        if token["id"] != next_id:
            consecutive = False
        next_id = token["id"] + 1
    rank_ids = set(ranks.values())
    for token in added:
        if token["content"] not in vocab and token["id"] in rank_ids:
            raise TokenizerFileError(
                f"added token {short(token['content'])} id {token['id']} collides with a rank"
            )
    if not consecutive:
        for token in added:
            vocab.setdefault(token["content"], token["id"])


def tiktoken_to_tokenizer_json(
    ranks: Mapping[bytes, int],
    pattern: str,
    special_tokens: Mapping[str, int],
    *,
    nfc: bool = False,
    added_tokens: Sequence[Mapping[str, Any]] | None = None,
    ignore_merges: bool | None = None,
) -> dict[str, Any]:
    """A Hugging Face tokenizer.json dict equivalent to tiktoken with these ranks.

    ``special_tokens`` maps content -> id (added with ``special: true``); ``added_tokens`` are
    further tokenizer.json-style entries (``content``, ``id`` and optional ``special``,
    ``normalized``, ``lstrip``, ``rstrip``, ``single_word``; default flags false) and override
    ``special_tokens`` entries with the same content. Added tokens whose ids do not follow the
    ranks consecutively are also put into ``model.vocab`` so that ``tokenizers`` keeps their
    ids. ``ignore_merges`` defaults to true only when some token is unreachable by merges.
    """
    vocab: dict[str, int] = {
        token_to_unicode(token): rank for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    }
    added = _normalize_added(special_tokens, added_tokens)
    _place_added(vocab, ranks, added)
    found, unreachable = _split_all(ranks)
    if ignore_merges is None:
        ignore_merges = bool(unreachable)
    merges = [[token_to_unicode(left), token_to_unicode(right)] for _, left, right in found]
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": pattern},
                    "behavior": "Isolated",
                    "invert": False,
                },
                dict(byte_level),
            ],
        },
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }
