"""The model's context length as ``vllm serve`` derives it from ``config.json``, when the user
gives no ``--max-model-len``: the number textproc's prompt checks use and the engine is asked for.

The rules are vLLM's (``_get_and_verify_max_len`` and ``derive_max_model_len_and_key`` of the
installed 0.32, for a text-generation model with no user value): the smallest of the length
keys the text config has (``max_position_embeddings``, ``n_positions``, ``max_seq_len``,
``seq_length``, ``max_target_positions``, ``max_sequence_length``, ``max_seq_length``,
``seq_len``), overridden by ``model_max_length`` when set (Command-R); times the RoPE scaling
``factor`` unless the type already scales the positions (``yarn``, ``llama3``, ``longrope``,
``su``, ``deepseek_yarn``, ``deepseek_llama_scaling``: the config's length is the scaled one) or
the model is a Gemma 3; with ``longrope`` the ``original_max_position_embeddings``. The text
config is ``text_config`` (or ``decoder`` / ``generator``) of a multimodal config, else the
config itself. vLLM reads transformers' config object, whose class fills a key the file lacks:
for the common families that default is :data:`FAMILY_DEFAULTS` here (checked against
transformers), for any other vLLM's own fallback, 2,048.

Never imports vLLM or transformers; reads one file. A directory with no ``config.json`` (a
tokenizer alone, enough for the stub engine) has no context length here (None). A malformed
file is an :class:`~textproc.errors.InvalidInput` naming it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textproc.errors import InvalidInput, short

__all__ = ["FAMILY_DEFAULTS", "ContextLength", "model_context_length"]

MODEL_CONFIG_FILE = "config.json"
# vLLM's keys, in its order (the smallest present wins)
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length
_SCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn",
                      "deepseek_llama_scaling")
_TEXT_CONFIG_KEYS = ("text_config", "decoder", "generator")  # transformers' get_text_config
# vLLM's length when the config has none of the keys (and its class gives none)
NO_KEY_LENGTH = 2048
# model_type -> max_position_embeddings of transformers' config class, used when config.json
# lacks every length key (transformers 5.19's defaults)
FAMILY_DEFAULTS: Mapping[str, int] = {
    "llama": 2048, "mistral": 131072, "mixtral": 131072, "ministral": 131072,
    "qwen2": 32768, "qwen2_moe": 32768, "qwen3": 32768, "qwen3_moe": 32768,
    "gemma": 8192, "gemma2": 8192, "gemma3_text": 131072, "phi": 2048, "phi3": 4096,
    "gpt2": 1024, "deepseek_v3": 4096, "glm4": 131072, "glm4_moe": 131072,
    "gpt_oss": 131072, "granite": 2048, "olmo2": 2048, "cohere": 8192, "cohere2": 8192,
    "starcoder2": 4096, "smollm3": 32768, "ernie4_5": 131072,
}


@dataclass(frozen=True)
class ContextLength:
    """A model's context length in tokens and what gave it, for the log."""

    tokens: int
    source: str  # e.g. "max_position_embeddings 4096 of /m/config.json"


def model_context_length(model_dir: str | Path) -> ContextLength | None:
    """The length ``vllm serve`` would use for ``model_dir`` with no ``--max-model-len``; None
    when the directory has no ``config.json``.

    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"model_type": "llama",
    ...     "max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}))
    >>> model_context_length(d).tokens
    8192
    """
    path = Path(model_dir) / MODEL_CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read {path}: {e}") from e
    try:
        config = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{path} is not JSON: {e}") from e
    if not isinstance(config, dict):
        raise InvalidInput(f"{path} must be a JSON object, got {short(config)}")
    return _derive(config, path)


def _text_config(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            return sub, f"$.{key}"
    return config, "$"


def _number(value: object, where: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise InvalidInput(f"{where} in {path} must be a positive number, got {short(value)}")
    return float(value)


def _rope_parameters(text: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The RoPE parameter dicts (one per layer type when nested), as transformers reads them:
    ``rope_parameters``, else the older ``rope_scaling``."""
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return
    nested = [value for value in rope.values() if isinstance(value, dict)]
    if nested and len(nested) == len(rope):  # {"full_attention": {...}, ...}
        yield from (value for value in nested if value)
    else:
        yield rope


def _derive(config: dict[str, Any], path: Path) -> ContextLength:
    text, at = _text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    length = math.inf
    source = ""
    for key in _LENGTH_KEYS:
        value = text.get(key)
        if value is not None and _number(value, f"{at}.{key}", path) < length:
            length, source = float(value), key
    if text.get("model_max_length"):  # Command-R: overrides the others
        length, source = float(text["model_max_length"]), "model_max_length"
    if math.isinf(length):
        length = float(FAMILY_DEFAULTS.get(model_type, NO_KEY_LENGTH))
        source = (f"transformers' default max_position_embeddings for {model_type!r}"
                  if model_type in FAMILY_DEFAULTS else "vLLM's default, no length key")
    else:
        source = f"{at}.{source} {int(length)}"
    rope = list(_rope_parameters(text))
    if rope and "gemma3" not in model_type:
        factor = 1.0  # (vLLM assumes one factor for every layer type: the last one's)
        for params in rope:
            rope_type = params.get("rope_type", params.get("type", "default"))
            if rope_type not in _SCALED_ROPE_TYPES:
                raw = params.get("factor", factor)
                factor = 1.0 if raw is None else _number(raw, f"{at}.rope_parameters.factor", path)
        if factor != 1.0:
            length *= factor
            source += f" x RoPE factor {factor:g}"
    if any(params.get("rope_type", params.get("type")) == "longrope" for params in rope):
        original = text.get("original_max_position_embeddings")
        if original is not None:
            length = _number(original, f"{at}.original_max_position_embeddings", path)
            source = f"{at}.original_max_position_embeddings {int(length)} (longrope)"
    return ContextLength(int(length), f"{source} of {path}")
