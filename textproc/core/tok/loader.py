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
from textproc.core.tok.jsonpath import Ctx

__all__ = ["read_json", "DirConfig", "read_dir_config", "SPECIAL_KEYS", "SerdeFloat", "serde_float", "hf_float"]

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


_U64_MAX = 2**64 - 1
# serde_json's POW10 table: the f64 literals 1e0 ..= 1e308 (correctly rounded, as float() is)
_POW10 = [float(f"1e{k}") for k in range(309)]


class SerdeFloat(float):
    """A JSON number already parsed the way HF ``tokenizers`` (serde_json) parses it."""

    __slots__ = ()


def serde_float(text: str) -> SerdeFloat:
    """The f64 serde_json (without its ``float_roundtrip`` feature, as ``tokenizers`` builds it)
    reads from the JSON number ``text``.

    That parser is not correctly rounded: it keeps at most the digits that fit a u64 (later
    ones only move the exponent, or are dropped after the point), converts them to f64 and then
    multiplies or divides once by a power of ten, rounding twice. ``-10.000530232488181`` comes
    out one ulp away from Python's ``float``, and Unigram scores that tie in one and not in the
    other segment text differently. Short numbers (15 digits, no exponent) are exact in both.
    """
    digits = len(text) - (text[0] == "-") - ("." in text)
    if digits <= 15 and "e" not in text and "E" not in text:
        return SerdeFloat(text)
    positive = not text.startswith("-")
    body = text if positive else text[1:]
    mantissa, _, exp_text = body.replace("E", "e").partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    significand = 0
    exponent = 0
    overflowed = False
    for c in int_part:
        if overflowed or significand * 10 + (ord(c) - 48) > _U64_MAX:
            overflowed = True
            exponent += 1  # integer digits past a full u64 only scale it
        else:
            significand = significand * 10 + (ord(c) - 48)
    for c in frac_part:
        if overflowed or significand * 10 + (ord(c) - 48) > _U64_MAX:
            overflowed = True  # fraction digits past a full u64 are dropped
            break
        significand = significand * 10 + (ord(c) - 48)
        exponent -= 1
    if exp_text:
        exp_value = int(exp_text)
        if exp_value > 2**31 - 1 or exp_value < -(2**31 - 1):
            if significand != 0 and exp_value > 0:
                raise ValueError(f"number out of range: {text}")
            return SerdeFloat(0.0 if positive else -0.0)
        exponent = max(-(2**31), min(2**31 - 1, exponent + exp_value))
    f = float(significand)
    while True:
        if abs(exponent) <= 308:
            if exponent >= 0:
                f *= _POW10[exponent]
            else:
                f /= _POW10[-exponent]
            break
        if f == 0.0:
            break
        if exponent >= 0:
            raise ValueError(f"number out of range: {text}")
        f /= 1e308
        exponent += 308
    if f == float("inf"):
        raise ValueError(f"number out of range: {text}")
    return SerdeFloat(f if positive else -f)


def hf_float(value: float) -> float:
    """``value`` as HF reads it: as parsed if it came from :func:`read_json`, else parsed again
    from the text ``json.dumps`` writes for it (what HF gets from a dumped dict)."""
    if type(value) is SerdeFloat or type(value) is int:
        return float(value)
    return float(serde_float(repr(float(value))))


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
        return json.loads(data, parse_float=serde_float)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerFileError(f"{path} is not valid JSON: {e}") from e
    except ValueError as e:  # a number serde_json refuses (out of f64 range)
        raise TokenizerFileError(f"{path}: {e}") from None
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
    # config.json's vocab_size: the model's embedding rows, often more than the tokenizer's ids
    # (Qwen3: 151,936 rows for 151,669 ids); an engine may sample a padding id past the last one
    model_vocab_size: int = 0


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
    model_path = model_dir / "config.json"
    if model_path.is_file():
        model = read_json(model_path)
        if isinstance(model, dict):
            size = model.get("vocab_size", (model.get("text_config") or {}).get("vocab_size"))
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                cfg.model_vocab_size = size
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
