"""Typed access to tokenizer.json values with errors that name the file and JSON path.

Every accessor raises :class:`TokenizerFileError` (never KeyError/TypeError) saying what was
wrong, where (``$.model.merges[3]`` in the file) and what is allowed.
"""

from __future__ import annotations

from typing import Any, NoReturn

from textproc.errors import TokenizerFileError, short

__all__ = ["Ctx", "MISSING", "MAX_NESTING", "MAX_ID", "sparse_id_limit", "id_limit_reason"]

# Sequence components nested deeper than this are refused (HF's serde_json stops at 128 JSON
# levels, i.e. 64 Sequences; recursion would otherwise end in RecursionError)
MAX_NESTING = 64

# token ids are u32 in HF tokenizers (it refuses larger ones); id -> token tables are dense
# lists, so a vocabulary whose largest id is far beyond its size (a 10-token vocab with id
# 2**31 would need a 16 GB table) is refused too
MAX_ID = 2**32 - 1
_DENSE_SLACK = 1 << 20


def sparse_id_limit(count: int) -> int:
    """The largest token id accepted for a vocabulary of ``count`` tokens."""
    return min(MAX_ID, max(_DENSE_SLACK, 4 * count))


def id_limit_reason(token_id: int, count: int) -> str:
    """Why ``token_id`` is refused, with what is allowed."""
    if not 0 <= token_id <= MAX_ID:
        return f"outside the u32 range HF tokenizers accepts; allowed: 0..{MAX_ID}"
    return (
        f"far beyond the vocabulary's {count} tokens (id tables are dense); "
        f"allowed: 0..{sparse_id_limit(count)}"
    )


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
}


class Ctx:
    """Where a tokenizer.json came from, for error messages."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str, path: str) -> NoReturn:
        raise TokenizerFileError(f"{message} at {path} in {self.source}")

    def unsupported(self, kind: str, type_name: object, path: str, supported: str) -> NoReturn:
        raise TokenizerFileError(
            f"unsupported {kind} type {short(type_name)} at {path} in {self.source}; "
            f"supported: {supported}"
        )

    def nesting(self, depth: int, path: str) -> None:
        """Refuse a component nested more than :data:`MAX_NESTING` Sequences deep."""
        if depth > MAX_NESTING:
            self.fail(f"components nested more than {MAX_NESTING} Sequences deep; allowed: at most {MAX_NESTING}", path)

    def check(self, value: Any, kind: type | tuple[type, ...], path: str) -> Any:
        """``value`` if it has type ``kind`` (bool is not an int, int is a float)."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = False
        for k in kinds:
            if k is int or k is float:
                if isinstance(value, bool):
                    continue
                if k is float and isinstance(value, (int, float)):
                    ok = True
                elif k is int and isinstance(value, int):
                    ok = True
            elif isinstance(value, k):
                ok = True
            if ok:
                break
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self.fail(f"expected {want}, got {short(value)}", path)
        return value

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        result: dict[str, Any] = self.check(value, dict, path)
        return result

    def get(
        self,
        obj: dict[str, Any],
        key: str,
        path: str,
        kind: type | tuple[type, ...],
        default: Any = MISSING,
    ) -> Any:
        """``obj[key]`` checked against ``kind``; ``default`` when absent (or null, if given)."""
        value = obj.get(key, MISSING)
        if value is MISSING or (value is None and default is not MISSING):
            if default is MISSING:
                self.fail(f"missing field {key!r}", path)
            return default
        return self.check(value, kind, f"{path}.{key}")

    def char(self, obj: dict[str, Any], key: str, path: str, default: Any = MISSING) -> str:
        value: str = self.get(obj, key, path, str, default)
        if len(value) != 1:
            self.fail(f"expected a single character, got {short(value)}", f"{path}.{key}")
        return value
