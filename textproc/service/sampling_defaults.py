"""The model's default sampling values (its ``generation_config.json``) and how a request's
options take them: what ``vllm serve`` does with its default ``--generation-config auto``.

The keys and the precedence are vLLM's (``ModelConfig.get_diff_sampling_param`` and the
OpenAI entrypoints' ``to_sampling_params`` / ``get_max_tokens``): the request's own value wins,
then the file's, then the engine's neutral default. The file's ``temperature``, ``top_p``,
``top_k``, ``min_p``, ``repetition_penalty``, ``presence_penalty`` and ``frequency_penalty``
fill the ``SamplingOptions.params`` keys of the same names that a request left unset (absent
or null); its ``max_new_tokens`` is the default ``max_tokens``, capped by what the context
leaves after the prompt. Every other key (``do_sample``, ``eos_token_id``...) is ignored, as
vLLM ignores it. ``serve --generation-config none`` is vLLM's ``--generation-config vllm``: no
defaults, the engine's own.

A missing file means no defaults. A file that is there but malformed (not JSON, not an object,
one of those keys with a value of the wrong type) is a startup error naming the file and the
key, not a silent change of how every request samples. Ranges (a negative temperature) are the
engine's to check, as for a request's own values. Reads one file; no sockets.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textproc.errors import InvalidInput, short
from textproc.options import SamplingOptions

__all__ = ["GENERATION_CONFIG_FILE", "SAMPLING_DEFAULT_KEYS", "SamplingDefaults",
           "load_sampling_defaults"]

GENERATION_CONFIG_FILE = "generation_config.json"
# vLLM's list (get_diff_sampling_param's available_params, without max_new_tokens): each is
# also the SamplingOptions.params key an engine reads
SAMPLING_DEFAULT_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty",
                         "temperature", "top_k", "top_p", "min_p")
_MAX_TOKENS_KEY = "max_new_tokens"  # Hugging Face's name of the default max_tokens
_FIX = "fix the file, or serve with --generation-config none to ignore it"


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


def load_sampling_defaults(model_dir: str | Path) -> SamplingDefaults:
    """The defaults in ``model_dir``'s generation_config.json: empty when there is no such file;
    InvalidInput naming the file and the key when it is malformed."""
    path = Path(model_dir) / GENERATION_CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return SamplingDefaults()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read {path}: {e}; {_FIX}") from e
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{path} is not valid JSON ({e}); {_FIX}") from e
    if not isinstance(obj, dict):
        raise InvalidInput(f"{path} must hold a JSON object, got {short(obj)}; {_FIX}")
    params = {key: _number(key, obj[key], str(path))
              for key in SAMPLING_DEFAULT_KEYS if obj.get(key) is not None}
    max_tokens = obj.get(_MAX_TOKENS_KEY)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise InvalidInput(f"{_MAX_TOKENS_KEY}={short(max_tokens)} at $.{_MAX_TOKENS_KEY} in "
                           f"{path}; allowed: an integer >= 1 or null; {_FIX}")
    return SamplingDefaults(params=params, max_tokens=max_tokens)
