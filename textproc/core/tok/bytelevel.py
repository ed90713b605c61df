"""GPT-2 byte-level alphabet: byte <-> printable character tables and fast mappings.

``piece.encode("utf-8").decode("latin-1").translate(BYTE_TO_CHAR_TABLE)`` maps text to its
byte-level form entirely in C; :func:`byte_level_bytes` maps a vocabulary token back to bytes.
"""

from __future__ import annotations

__all__ = [
    "BYTE_CHARS",
    "CHAR_TO_BYTE",
    "BYTE_TO_CHAR_TABLE",
    "to_byte_level",
    "byte_level_bytes",
]


def _byte_chars() -> tuple[str, ...]:
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


# byte value -> its printable character ("Ġ" for b" ")
BYTE_CHARS: tuple[str, ...] = _byte_chars()
# printable character -> byte value
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_CHARS)}
# str.translate table: code point of a latin-1 decoded byte -> byte-level character
BYTE_TO_CHAR_TABLE: dict[int, str] = {b: c for b, c in enumerate(BYTE_CHARS)}


def to_byte_level(text: str) -> str:
    """The byte-level form of ``text`` (``" hi"`` -> ``"Ġhi"``)."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(BYTE_TO_CHAR_TABLE)


def byte_level_bytes(token: str) -> bytes | None:
    """Bytes of a byte-level token, or None when a character is outside the alphabet."""
    get = CHAR_TO_BYTE.get
    out = bytearray()
    for c in token:
        b = get(c)
        if b is None:
            return None
        out.append(b)
    return bytes(out)
