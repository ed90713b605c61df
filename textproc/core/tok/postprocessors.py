"""tokenizer.json post-processors for one sequence with ``add_special_tokens=True``.

Each supported processor wraps the ids in fixed prefix/suffix ids: TemplateProcessing
(``single`` template), RobertaProcessing / BertProcessing (``cls`` ... ``sep``), ByteLevel
(offsets only: no change to ids) and Sequence (applied in order). Others are refused.
"""

from __future__ import annotations

from typing import Any

from textproc.core.tok.jsonpath import Ctx

__all__ = ["build_postprocessor", "SUPPORTED_POSTPROCESSORS"]

SUPPORTED_POSTPROCESSORS = "TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence"


def _pair(ctx: Ctx, obj: dict[str, Any], key: str, path: str) -> int:
    value = ctx.get(obj, key, path, list)
    if len(value) != 2:
        ctx.fail(f"expected [token, id], got {value!r}", f"{path}.{key}")
    ctx.check(value[0], str, f"{path}.{key}[0]")
    token_id: int = ctx.check(value[1], int, f"{path}.{key}[1]")
    return token_id


def _template(ctx: Ctx, obj: dict[str, Any], path: str) -> tuple[list[int], list[int]]:
    single = ctx.get(obj, "single", path, list)
    specials = ctx.get(obj, "special_tokens", path, dict, {})
    prefix: list[int] = []
    suffix: list[int] = []
    seen_seq = False
    for i, piece in enumerate(single):
        p = f"{path}.single[{i}]"
        piece = ctx.obj(piece, p)
        if "Sequence" in piece:
            seq = ctx.obj(piece["Sequence"], f"{p}.Sequence")
            if ctx.get(seq, "id", f"{p}.Sequence", str) != "A" or seen_seq:
                ctx.fail("a single-sequence template may use sequence 'A' once", p)
            seen_seq = True
        elif "SpecialToken" in piece:
            sp = ctx.obj(piece["SpecialToken"], f"{p}.SpecialToken")
            name = ctx.get(sp, "id", f"{p}.SpecialToken", str)
            if name not in specials:
                ctx.fail(f"special token {name!r} is not in special_tokens", f"{p}.SpecialToken.id")
            entry = ctx.obj(specials[name], f"{path}.special_tokens[{name!r}]")
            ids = ctx.get(entry, "ids", f"{path}.special_tokens[{name!r}]", list)
            for j, token_id in enumerate(ids):
                ctx.check(token_id, int, f"{path}.special_tokens[{name!r}].ids[{j}]")
            (suffix if seen_seq else prefix).extend(ids)
        else:
            ctx.fail(f"expected {{'Sequence': ...}} or {{'SpecialToken': ...}}, got {piece!r}", p)
    if not seen_seq:
        ctx.fail("the single template has no sequence 'A'", f"{path}.single")
    return prefix, suffix


def _collect(ctx: Ctx, spec: Any, path: str, out: list[tuple[list[int], list[int]]], depth: int = 0) -> None:
    ctx.nesting(depth, path)
    obj = ctx.obj(spec, path)
    kind = ctx.get(obj, "type", path, str)
    if kind == "Sequence":
        for i, item in enumerate(ctx.get(obj, "processors", path, list)):
            _collect(ctx, item, f"{path}.processors[{i}]", out, depth + 1)
    elif kind == "ByteLevel":
        return
    elif kind == "TemplateProcessing":
        out.append(_template(ctx, obj, path))
    elif kind in ("RobertaProcessing", "BertProcessing"):
        out.append(([_pair(ctx, obj, "cls", path)], [_pair(ctx, obj, "sep", path)]))
    else:
        ctx.unsupported("post_processor", kind, path, SUPPORTED_POSTPROCESSORS)


def build_postprocessor(ctx: Ctx, spec: Any, path: str) -> tuple[list[int], list[int]]:
    """(prefix ids, suffix ids) added around one sequence when ``add_special_tokens=True``."""
    parts: list[tuple[list[int], list[int]]] = []
    if spec is not None:
        _collect(ctx, spec, path, parts)
    prefix: list[int] = []
    suffix: list[int] = []
    for pre, suf in parts:
        prefix = pre + prefix
        suffix = suffix + suf
    return prefix, suffix
