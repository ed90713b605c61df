"""The options a generation request carries, as three values, and the one check of each field.

* ``SamplingOptions``: what the engine does (token counts, stop ids, n, sampling values);
* ``OutputOptions``: what the client wants done with the output (stops, specials, tool-call
  streaming, logprobs);
* ``ParseOptions``: how the worker decided the output is split (the model's reasoning and
  tool-call formats, the request's tools).

They are built and checked once where a request enters (the HTTP body, a ``TextClient`` call),
travel whole inside the frames (msgspec encodes dataclasses: ``ChatRequest.sampling`` /
``.output``, ``Submit.output`` / ``.parse``) and are read where they are used (the worker, the
detokenizer's ``OutputPipeline``, the ``OutputParser``, the HTTP answer's logprobs), with the
same name and type at every layer. A new option is a field here, its check here, and the line
that reads it: a field that names its OpenAI body field (``metadata=_body("name")``; a sampling
value the engine reads by name: an entry of ``SAMPLING_PARAMS``) is a field of the chat and
completion bodies too, with its type, range and default from here (``BODY_OPTIONS``, which
``textproc.http`` builds its bodies and the request's values from; nothing there names it).
The values travel as maps keyed by field name, so a new field with a default needs no
PROTOCOL_VERSION bump: an older peer ignores it and a newer one reads the default from an older
peer's frame (tested).

Imports only the standard library and ``textproc.errors`` (like ``errors.py``), so the text
core reads these values too; never msgspec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, get_type_hints

from textproc.errors import InvalidInput, short

__all__ = [
    "SamplingOptions",
    "OutputOptions",
    "ParseOptions",
    "BodyOption",
    "BODY_OPTIONS",
    "SAMPLING_PARAMS",
    "split_options",
    "check_sampling_options",
    "check_output_options",
    "check_stops",
    "check_tools",
    "check_tool_choice",
    "check_n",
    "MAX_CHOICES",
    "MAX_STOP_STRINGS",
    "MAX_STOP_CHARS",
    "MAX_TOP_LOGPROBS",
    "MAX_LOGIT_BIAS",
    "LOGIT_BIAS_RANGE",
    "PRIORITY_RANGE",
    "REASONING_BUDGET_OPTIONAL",
]

# The limits of one request, written once (textproc.protocol re-exports them).
MAX_CHOICES = 128  # n per request: one prompt, this many engine requests at most
MAX_STOP_STRINGS = 64  # stop strings per request (OpenAI allows 4; each costs per-step work)
MAX_STOP_CHARS = 1024  # characters per stop string (the stop checker holds back at most this - 1)
MAX_TOP_LOGPROBS = 20  # alternatives per token a request may ask for (OpenAI's top_logprobs limit)
MAX_LOGIT_BIAS = 1024  # entries of one request's logit_bias
LOGIT_BIAS_RANGE = (-100.0, 100.0)  # OpenAI's: -100 bans a token, 100 forces it
PRIORITY_RANGE = (-(2**63), 2**63 - 1)  # vLLM's priority: an int64

# A ``SamplingOptions.params`` switch beside ``max_reasoning_tokens``: the budget applies where
# the model reasons in tagged markup and is dropped elsewhere (Anthropic's ``budget_tokens`` is a
# cap), instead of the 400 a chat request's budget gets there. The worker takes it out.
REASONING_BUDGET_OPTIONAL = "reasoning_budget_optional"

_SCALARS = (str, int, float, bool, type(None))
_TOOL_CHOICES = ("none", "auto", "required")


def _body(name: str, **bounds: int | float) -> dict[str, Any]:
    """A field's metadata: the OpenAI chat and completion bodies carry it as ``name``, within
    ``bounds`` (``ge`` / ``gt`` / ``le``, as ``BodyOption``'s)."""
    return {"body": name, **bounds}


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplingOptions:
    """What the engine does with a request (the worker turns it into the ``EngineRequest``)."""

    max_tokens: int | None = None  # None: whatever max_model_len leaves after the prompt
    min_tokens: int = 0  # no stop (EOS, stop id, stop string) before this many tokens
    stop_token_ids: list[int] = field(default_factory=list)  # extra stop ids, added to EOS
    ignore_eos: bool = field(default=False, metadata=_body("ignore_eos"))
    # n > 1: the prompt is built once and runs as n engine requests "<request_id>-<i>" (seed + i
    # when params has a seed)
    n: int = 1
    # temperature, top_p, top_k, seed, ...: scalars (or lists of them) the engine reads by name
    params: dict[str, Any] = field(default_factory=dict)
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> -100..100
    # the engine scheduler's order (vLLM's ``priority``: lower is served first; under vLLM's
    # default fcfs policy it is accepted and ignored), kept by textproc's own queues too
    priority: int = field(default=0, metadata=_body("priority", ge=PRIORITY_RANGE[0],
                                                        le=PRIORITY_RANGE[1]))
    # the LoRA adapter the engine serves it with (its name, what the request's model named;
    # "": the base model)
    lora: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputOptions:
    """What the client wants done with the output (the detokenizer's pipeline reads it)."""

    stop: list[str] = field(default_factory=list)
    # a matched stop string stays in the text
    include_stop: bool = field(default=False, metadata=_body("include_stop_str_in_output"))
    skip_special_tokens: bool = field(default=True, metadata=_body("skip_special_tokens"))
    # kept for compatibility: every tool call is held until it is complete and valid
    stream_calls: bool = True
    parallel_tool_calls: bool = True  # False: at most one tool call; later ones are content
    # None: no logprobs; k in 0..MAX_TOP_LOGPROBS: each output token's logprob and its k most
    # likely alternatives
    logprobs: int | None = None
    # logprobs name each token (and alternative) "token_id:<id>" instead of its text, so a token
    # that is not text by itself is still identified (vLLM's option; bytes stay the token's)
    return_tokens_as_token_ids: bool = field(default=False,
                                             metadata=_body("return_tokens_as_token_ids"))
    # each output carries the engine's ids since the previous one (``RequestOutput.token_ids``),
    # every generated id included (EOS, ids a stop string cut): the token-in / token-out routes
    return_token_ids: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ParseOptions:
    """How the output is split into reasoning, content and tool calls (the ``OutputParser``'s
    setup; the worker fills it from the model's formats and the request's tools)."""

    reasoning: bool = False  # parse reasoning blocks of reasoning_format
    tools: bool = False  # parse tool calls of tool_format
    starts_in_reasoning: bool = False  # the prompt ends inside an open reasoning block
    tool_format: str = ""  # a textproc.core.parsing.TOOL_FORMATS name; "": the default format
    reasoning_format: str = ""  # a REASONING_FORMATS name; "": the default format
    # the request's OpenAI tools (declared names, value types); None: any name is a call
    tool_schemas: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class BodyOption:
    """An option the OpenAI chat and completion bodies carry as it is: body field ``name``
    holds ``owner``'s field ``field`` ("sampling" / "output": a field of that value;
    "params": a ``SamplingOptions.params`` key), typed ``kind``, within ``ge`` / ``gt`` /
    ``le``; ``default`` when absent (None: left out, the engine's or the model's default)."""

    name: str
    owner: str
    field: str
    kind: Any
    default: Any = None
    default_factory: Any = None  # for a list or dict default
    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None


def _param(name: str, kind: type, **bounds: int | float) -> BodyOption:
    return BodyOption(name, "params", name, kind, **bounds)


# The sampling values the engine reads by name from ``SamplingOptions.params`` (vLLM's names and
# ranges); the chat and completion bodies carry each one, null or absent: not sent.
SAMPLING_PARAMS = (
    _param("temperature", float, ge=0.0, le=2.0),
    _param("top_p", float, gt=0.0, le=1.0),
    _param("top_k", int, ge=-1, le=2**31 - 1),  # -1 (or 0): no top-k, as in vLLM
    _param("min_p", float, ge=0.0, le=1.0),
    _param("presence_penalty", float, ge=-2.0, le=2.0),
    _param("frequency_penalty", float, ge=-2.0, le=2.0),
    _param("repetition_penalty", float, gt=0.0),
    _param("seed", int, ge=-(2**63), le=2**63 - 1),  # the int64 vLLM and OpenAI take
)


def _field_options() -> list[BodyOption]:
    out = []
    for owner, cls in (("sampling", SamplingOptions), ("output", OutputOptions)):
        hints = get_type_hints(cls)
        for f in fields(cls):
            if "body" in f.metadata:
                factory = None if f.default_factory is MISSING else f.default_factory
                bounds = {k: f.metadata[k] for k in ("ge", "gt", "le") if k in f.metadata}
                out.append(BodyOption(f.metadata["body"], owner, f.name, hints[f.name],
                                      None if f.default is MISSING else f.default, factory,
                                      **bounds))
    return out


# every option the chat and completion bodies carry as it is, by body name
BODY_OPTIONS: tuple[BodyOption, ...] = (*_field_options(), *SAMPLING_PARAMS)

_SAMPLING_FIELDS = frozenset(f.name for f in fields(SamplingOptions))
_OUTPUT_FIELDS = frozenset(f.name for f in fields(OutputOptions))
_PARSE_FIELDS = frozenset(f.name for f in fields(ParseOptions))


def split_options(given: Mapping[str, Any]) -> tuple[SamplingOptions, OutputOptions, ParseOptions]:
    """Keyword options sorted into the three values by field name (the keyword convenience of
    ``TextClient.chat``, ``OutputPipeline`` and ``OutputParser``); an unknown name is a
    TypeError naming it.

    >>> split_options({"max_tokens": 5, "stop": ["x"]})[:2]
    (SamplingOptions(max_tokens=5, min_tokens=0, stop_token_ids=[], ignore_eos=False, n=1, params={}, logit_bias={}, priority=0, lora=''), OutputOptions(stop=['x'], include_stop=False, skip_special_tokens=True, stream_calls=True, parallel_tool_calls=True, logprobs=None, return_tokens_as_token_ids=False, return_token_ids=False))
    """
    unknown = set(given) - _SAMPLING_FIELDS - _OUTPUT_FIELDS - _PARSE_FIELDS
    if unknown:
        raise TypeError(f"unknown request options {sorted(unknown)}; known: "
                        f"{sorted(_SAMPLING_FIELDS | _OUTPUT_FIELDS | _PARSE_FIELDS)}")
    return (SamplingOptions(**{k: v for k, v in given.items() if k in _SAMPLING_FIELDS}),
            OutputOptions(**{k: v for k, v in given.items() if k in _OUTPUT_FIELDS}),
            ParseOptions(**{k: v for k, v in given.items() if k in _PARSE_FIELDS}))


# -- the checks: one per field, the same message wherever the request enters -------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_n(n: object) -> int:
    """``n`` in 1..MAX_CHOICES."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise InvalidInput(f"n={short(n)} is out of range; allowed: 1..{MAX_CHOICES}", param="n")
    return n


def check_stops(stop: Sequence[object], max_stops: int = MAX_STOP_STRINGS,
                max_stop_chars: int = MAX_STOP_CHARS) -> None:
    """At most max_stops non-empty strings of at most max_stop_chars each."""
    if len(stop) > max_stops:
        raise InvalidInput(f"stop has {len(stop)} strings; at most {max_stops} "
                           "are allowed", param="stop")
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise InvalidInput(f"stop[{i}]={short(s)} is not a string", param="stop")
        if not s:
            raise InvalidInput(f"stop[{i}] is empty; stop strings must be non-empty",
                               param="stop")
        if len(s) > max_stop_chars:
            raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most "
                               f"{max_stop_chars} allowed", param="stop")


def check_sampling_options(sampling: SamplingOptions) -> None:
    """The fields that need no model: counts, n, and sampling values as scalars (or lists of
    them). The context length and the vocabulary are the worker's to check."""
    check_n(sampling.n)
    max_tokens = sampling.max_tokens
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise InvalidInput(f"max_tokens={max_tokens!r}; allowed: >= 1", param="max_tokens")
    if not _is_int(sampling.min_tokens) or sampling.min_tokens < 0:
        raise InvalidInput(f"min_tokens={short(sampling.min_tokens)}; allowed: >= 0",
                           param="min_tokens")
    for key, value in sampling.params.items():
        if not isinstance(value, _SCALARS) and not (
                isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)):
            raise InvalidInput(f"sampling[{key!r}]={short(value)}; allowed: numbers, strings, "
                               "booleans, null or lists of them", param=str(key))
    if len(sampling.logit_bias) > MAX_LOGIT_BIAS:
        raise InvalidInput(f"logit_bias has {len(sampling.logit_bias)} entries; at most "
                           f"{MAX_LOGIT_BIAS} are allowed", param="logit_bias")
    low, high = LOGIT_BIAS_RANGE
    for token_id, bias in sampling.logit_bias.items():
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) \
                or not low <= bias <= high:
            raise InvalidInput(f"logit_bias[{short(token_id)}]={short(bias)}; allowed: numbers "
                               f"from {low:g} to {high:g}", param="logit_bias")
    if not isinstance(sampling.lora, str):
        raise InvalidInput(f"lora={short(sampling.lora)}; allowed: an adapter's name",
                           param="model")
    if not _is_int(sampling.priority) or \
            not PRIORITY_RANGE[0] <= sampling.priority <= PRIORITY_RANGE[1]:
        raise InvalidInput(f"priority={short(sampling.priority)}; allowed: an integer from "
                           f"{PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]} (lower is served first)",
                           param="priority")


def check_output_options(output: OutputOptions, *, max_stops: int = MAX_STOP_STRINGS,
                         max_stop_chars: int = MAX_STOP_CHARS) -> None:
    """Stop strings within the limits, logprobs in 0..MAX_TOP_LOGPROBS or None."""
    check_stops(output.stop, max_stops, max_stop_chars)
    logprobs = output.logprobs
    if logprobs is not None and (not _is_int(logprobs) or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise InvalidInput(f"logprobs={short(logprobs)}; allowed: alternatives per token, "
                           f"0..{MAX_TOP_LOGPROBS}", param="logprobs")


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """``tools`` as OpenAI's function tools (each with a non-empty name); [] for None."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidInput(f"tools must be a list, got {short(tools)}", param="tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or \
                not isinstance(name, str) or not name:
            raise InvalidInput(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, ...}}}}, "
                f"got {short(tool)}", param=f"tools[{i}]")
    return tools


def check_tool_choice(tool_choice: Any, tools: list[dict[str, Any]],
                      structured: object = None) -> tuple[str, str | None]:
    """('none' | 'auto' | 'required' | 'named', the forced function's name or None); a forced
    call together with a ``structured`` output format is refused (one constraint per request)."""
    choice, name = _tool_choice(tool_choice, tools)
    if structured is not None and (choice == "required" or name is not None):
        raise InvalidInput("a structured output format together with a forced tool call "
                           "(tool_choice required / named) is not supported; give one",
                           param="tool_choice")
    return choice, name


def _tool_choice(tool_choice: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    names = [t["function"]["name"] for t in tools]
    if isinstance(tool_choice, str):
        if tool_choice not in _TOOL_CHOICES:
            raise InvalidInput(
                f"tool_choice {tool_choice!r} is not allowed; use 'none', 'auto', 'required' "
                "or {'type': 'function', 'function': {'name': ...}}", param="tool_choice")
        if tool_choice == "required" and not tools:
            raise InvalidInput("tool_choice 'required' needs at least one tool in tools",
                               param="tool_choice")
        return tool_choice, None
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidInput(
            f"tool_choice {short(tool_choice)} must name a function: "
            "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
    if name not in names:
        raise InvalidInput(f"tool_choice names unknown tool {name!r}; tools are {short(names)}",
                           param="tool_choice")
    return "named", name
