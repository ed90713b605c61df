"""Reading tokenizer files: tokenizer.json, tokenizer_config.json, chat_template.jinja.

The only module of the tokenizer that touches the file system, and only for paths it was
handed. Every failure is a :class:`TokenizerFileError` naming the file (and JSON path).
"""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textproc.errors import TokenizerFileError, short
from textproc.tok.jsonpath import Ctx

__all__ = ["read_json", "DirConfig", "read_dir_config", "SPECIAL_KEYS"]

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def read_json(path: Path) -> Any:
    """Parse a JSON file; errors name the file and the line/column."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TokenizerFileError(f"cannot read {path}: {e.strerror or e}") from e
    # a big tokenizer.json is ~1M containers: collections during the parse cost more than it
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerFileError(f"{path} is not valid JSON: {e}") from e
    except RecursionError:
        raise TokenizerFileError(
            f"{path} nests JSON arrays/objects too deeply to parse; a tokenizer.json needs only a few levels"
        ) from None
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass
class DirConfig:
    """What tokenizer_config.json (+ special_tokens_map.json, chat_template.jinja) add."""

    special_tokens_map: dict[str, str] = field(default_factory=dict)
    chat_template: str | dict[str, str] | None = None


def _token_text(ctx: Ctx, value: Any, path: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        content: str = ctx.get(value, "content", path, str)
        return content
    ctx.fail(f"expected a token string or {{'content': ...}}, got {short(value)}", path)


def _chat_template(ctx: Ctx, value: Any, path: str) -> str | dict[str, str] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        out: dict[str, str] = {}
        for i, item in enumerate(value):
            obj = ctx.obj(item, f"{path}[{i}]")
            out[ctx.get(obj, "name", f"{path}[{i}]", str)] = ctx.get(obj, "template", f"{path}[{i}]", str)
        return out
    if isinstance(value, dict):
        return {str(k): ctx.check(v, str, f"{path}[{k!r}]") for k, v in value.items()}
    ctx.fail(f"expected a string or a list of {{'name', 'template'}}, got {short(value)}", path)


def read_dir_config(model_dir: Path) -> DirConfig:
    """Special tokens and chat template of a model directory (all files optional)."""
    cfg = DirConfig()
    stm_path = model_dir / "special_tokens_map.json"
    if stm_path.is_file():
        ctx = Ctx(str(stm_path))
        stm = ctx.obj(read_json(stm_path), "$")
        for key in SPECIAL_KEYS:
            text = _token_text(ctx, stm.get(key), f"$.{key}")
            if text is not None:
                cfg.special_tokens_map[key] = text
    conf_path = model_dir / "tokenizer_config.json"
    if conf_path.is_file():
        ctx = Ctx(str(conf_path))
        conf = ctx.obj(read_json(conf_path), "$")
        for key in SPECIAL_KEYS:
            if key in conf:
                text = _token_text(ctx, conf[key], f"$.{key}")
                if text is not None:
                    cfg.special_tokens_map[key] = text
        cfg.chat_template = _chat_template(ctx, conf.get("chat_template"), "$.chat_template")
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        try:
            template = jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerFileError(f"cannot read {jinja}: {e}") from e
        if isinstance(cfg.chat_template, dict):
            cfg.chat_template = {**cfg.chat_template, "default": template}
        else:
            cfg.chat_template = template
    return cfg
