"""The model's generation config (its ``generation_config.json``): the default sampling values
and how a request's options take them, and the ids that end a request like EOS; both as
``vllm serve`` takes them.

The keys and the precedence are vLLM's (``ModelConfig.get_diff_sampling_param`` and the
OpenAI entrypoints' ``to_sampling_params`` / ``get_max_tokens``): the request's own value wins,
then the file's, then the engine's neutral default. The file's ``temperature``, ``top_p``,
``top_k``, ``min_p``, ``repetition_penalty``, ``presence_penalty`` and ``frequency_penalty``
fill the ``SamplingOptions.params`` keys of the same names that a request left unset (absent
or null); its ``max_new_tokens`` is the default ``max_tokens``, capped by what the context
leaves after the prompt. Every other sampling key (``do_sample``...) is ignored, as vLLM
ignores it. ``serve --generation-config none`` is vLLM's ``--generation-config vllm``: no
defaults, the engine's own.

``eos_token_id`` (an id or a list of ids) is read whatever ``--generation-config`` says: vLLM's
input processor applies it in both modes (``SamplingParams.update_from_generation_config`` with
``ModelConfig.try_get_generation_config()``, which reads the model's file for "auto" and
"vllm" alike). Those ids and the tokenizer's EOS end a request, unless ``ignore_eos``, and are
masked until ``min_tokens`` even with it (:func:`stop_token_ids`; vLLM's
``all_stop_token_ids``). With no generation_config.json vLLM derives one from ``config.json``
(transformers' ``GenerationConfig.from_model_config``): its ``eos_token_id`` (top level, else
its ``text_config``'s) is read the same way; its sampling keys are not (no defaults then).
Neither file: the tokenizer's EOS alone.

A missing file means no defaults. A file that is there but malformed (not JSON, not an object,
one of those keys with a value of the wrong type) is a startup error naming the file and the
key, not a silent change of how every request samples or ends (vLLM falls back to config.json
without a word on a file that is not JSON). Ranges (a negative temperature) are the engine's to
check, as for a request's own values. Reads one file (config.json only when it is missing); no
sockets.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textproc.errors import InvalidInput, short
from textproc.options import SamplingOptions

__all__ = ["GENERATION_CONFIG_FILE", "MODEL_CONFIG_FILE", "SAMPLING_DEFAULT_KEYS", "GenerationConfig",
           "SamplingDefaults", "load_generation_config", "load_sampling_defaults", "stop_token_ids"]

GENERATION_CONFIG_FILE = "generation_config.json"
MODEL_CONFIG_FILE = "config.json"  # where vLLM finds eos_token_id when there is no generation config
# vLLM's list (get_diff_sampling_param's available_params, without max_new_tokens): each is
# also the SamplingOptions.params key an engine reads
SAMPLING_DEFAULT_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty",
                         "temperature", "top_k", "top_p", "min_p")
_MAX_TOKENS_KEY = "max_new_tokens"  # Hugging Face's name of the default max_tokens
_EOS_KEY = "eos_token_id"
# where transformers' from_model_config looks when config.json's top level has no value
_TEXT_CONFIG_KEYS = ("text_config", "decoder", "generator")
_FIX = "fix the file, or serve with --generation-config none to ignore its sampling values"
# a file-level or eos_token_id error: --generation-config none reads the file too
_FIX_EOS = "fix the file (its eos_token_id is read with either --generation-config, as vLLM does)"


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplingDefaults:
    """Sampling values a request gets when it sets none of its own (empty: none).

    >>> d = SamplingDefaults(params={"temperature": 0.6, "top_k": 20}, max_tokens=100)
    >>> d.apply(SamplingOptions(params={"temperature": 0.0})).params
    {'temperature': 0.0, 'top_k': 20}
    >>> d.max_tokens_for(room=30), d.max_tokens_for(room=500)
    (30, 100)
    """

    params: dict[str, int | float] = field(default_factory=dict)  # SAMPLING_DEFAULT_KEYS only
    max_tokens: int | None = None  # max_new_tokens; None: what the context leaves

    @property
    def is_empty(self) -> bool:
        return not self.params and self.max_tokens is None

    def apply(self, sampling: SamplingOptions) -> SamplingOptions:
        """``sampling`` with every default key it left unset (absent or None) filled in; the
        request's own values win. ``max_tokens`` is not touched here: its default depends on
        the prompt (:meth:`max_tokens_for`)."""
        given = sampling.params
        missing = {k: v for k, v in self.params.items() if given.get(k) is None}
        if not missing:
            return sampling
        return dataclasses.replace(sampling, params={**given, **missing})

    def max_tokens_for(self, *, room: int) -> int:
        """max_tokens of a request that set none, ``room`` tokens left after its prompt: the
        default capped by the room (never an error), or the room when there is no default."""
        return room if self.max_tokens is None else min(self.max_tokens, room)

    def describe(self) -> dict[str, Any]:
        """The defaults as one dict for a log line (``max_tokens`` with the params)."""
        out: dict[str, Any] = dict(self.params)
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out


def _number(key: str, value: object, where: str) -> int | float:
    if key == "top_k":  # an integer for every engine (vLLM's SamplingParams.top_k: int)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"top_k={short(value)} at $.top_k in {where} is not an integer; {_FIX}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{key}={short(value)} at $.{key} in {where} is not a finite number; "
                           f"{_FIX}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationConfig:
    """What textproc takes from a model's generation config: the sampling defaults and the
    ``eos_token_id`` ids (empty: none; ``eos_source`` names the file they came from).

    >>> GenerationConfig(eos_token_ids=(151645, 151643)).end_ids(151645)
    [151643, 151645]
    """

    defaults: SamplingDefaults = field(default_factory=SamplingDefaults)
    eos_token_ids: tuple[int, ...] = ()
    eos_source: str = ""

    def end_ids(self, tokenizer_eos: int | None) -> list[int]:
        """The ids that end a request like EOS, sorted: the tokenizer's EOS (None: none) and
        ``eos_token_ids``. They are the engine's EOS ids for every request and the ids a
        compiled constraint ends with."""
        ids = set(self.eos_token_ids)
        if tokenizer_eos is not None:
            ids.add(tokenizer_eos)
        return sorted(ids)


def stop_token_ids(end_ids: Sequence[int], request_ids: Sequence[int], *,
                   ignore_eos: bool) -> list[int]:
    """The ids the engine stops a request on, sorted: its own ``stop_token_ids`` and, unless
    ``ignore_eos``, the model's ``end_ids`` (vLLM's rule). Until ``min_tokens`` the engine
    masks these and ``end_ids`` too, with ``ignore_eos`` or not (``EngineRequest.eos_token_ids``:
    vLLM's ``all_stop_token_ids``).

    >>> stop_token_ids([2, 7], [5], ignore_eos=False), stop_token_ids([2, 7], [5], ignore_eos=True)
    ([2, 5, 7], [5])
    """
    return sorted(set(request_ids) if ignore_eos else set(end_ids) | set(request_ids))


def _read_object(path: Path, fix: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read {path}: {e}; {fix}") from e
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{path} is not valid JSON ({e}); {fix}") from e
    if not isinstance(obj, dict):
        raise InvalidInput(f"{path} must hold a JSON object, got {short(obj)}; {fix}")
    return obj


def _eos_ids(value: object, where: str, at: str) -> tuple[int, ...]:
    """An ``eos_token_id`` value (an id, a list of ids or null) as ids, in order, once each."""
    items = value if isinstance(value, list) else [] if value is None else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
        raise InvalidInput(f"{_EOS_KEY}={short(value)} at {at} in {where}; allowed: a token id "
                           f"(an integer >= 0), a list of them, or null; {_FIX_EOS}")
    return tuple(dict.fromkeys(items))


def _model_config_eos(model_dir: Path) -> GenerationConfig:
    """vLLM's generation config when the model has no generation_config.json: config.json's
    ``eos_token_id`` (top level, else its text_config's), as transformers' from_model_config
    takes it."""
    path = model_dir / MODEL_CONFIG_FILE
    obj = _read_object(path, _FIX_EOS)
    if obj is None:
        return GenerationConfig()
    value, at = obj.get(_EOS_KEY), f"$.{_EOS_KEY}"
    for key in _TEXT_CONFIG_KEYS:
        if value is None and isinstance(obj.get(key), dict):
            value, at = obj[key].get(_EOS_KEY), f"$.{key}.{_EOS_KEY}"
    ids = _eos_ids(value, str(path), at)
    return GenerationConfig(eos_token_ids=ids, eos_source=str(path) if ids else "")


def load_generation_config(model_dir: str | Path, *, sampling: bool = True) -> GenerationConfig:
    """``model_dir``'s generation config: its sampling defaults (none when ``sampling`` is
    False, ``serve --generation-config none``: those keys are then neither read nor checked)
    and its ``eos_token_id`` ids (read either way). InvalidInput naming the file and the key
    when it is malformed; config.json's ``eos_token_id`` when there is no such file."""
    path = Path(model_dir) / GENERATION_CONFIG_FILE
    obj = _read_object(path, _FIX_EOS)
    if obj is None:
        return _model_config_eos(Path(model_dir))
    eos = _eos_ids(obj.get(_EOS_KEY), str(path), f"$.{_EOS_KEY}")
    defaults = _sampling_defaults(obj, str(path)) if sampling else SamplingDefaults()
    return GenerationConfig(defaults=defaults, eos_token_ids=eos, eos_source=str(path) if eos else "")


def _sampling_defaults(obj: dict[str, Any], where: str) -> SamplingDefaults:
    params = {key: _number(key, obj[key], where)
              for key in SAMPLING_DEFAULT_KEYS if obj.get(key) is not None}
    max_tokens = obj.get(_MAX_TOKENS_KEY)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise InvalidInput(f"{_MAX_TOKENS_KEY}={short(max_tokens)} at $.{_MAX_TOKENS_KEY} in "
                           f"{where}; allowed: an integer >= 1 or null; {_FIX}")
    return SamplingDefaults(params=params, max_tokens=max_tokens)


def load_sampling_defaults(model_dir: str | Path) -> SamplingDefaults:
    """The sampling defaults in ``model_dir``'s generation_config.json (``load_generation_config``
    without the eos ids): empty when there is no such file."""
    return load_generation_config(model_dir).defaults
