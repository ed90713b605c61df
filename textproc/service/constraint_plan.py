"""What a chat request's output is constrained by: one pure function over the request's choices.

Owns the decision that ``tools``, ``tool_choice``, ``response_format`` (the structured spec), the
model's tool-call and reasoning formats and a reasoning budget (``max_reasoning_tokens``) make
together, in this order:

- a forced call (``tool_choice`` "required" or naming a function): the calls in the model's
  own tool format (the default format when the model has none);
- else a structured output: the spec's regex, and the whole output is that text (a ``<think>``
  inside a JSON string stays content), after free reasoning when the prompt leaves the model
  inside a reasoning block;
- else strict tools (``tool_choice`` "auto", the model has a tool format, and a tool is
  ``strict`` or the service runs ``--strict-tools``): free text with every call enforced;
- else nothing;

and then a reasoning budget, which needs reasoning markup with open and close tags: the
constraint the engine's guide counts in (free reasoning, then free text, when there is none
yet) and the markup the engine needs, as sampling parameters. Nothing here does I/O or keeps
state; :class:`~textproc.service.request_builder.RequestBuilder` calls it once per chat request
with the tools and tool choice already checked, and a compile error names ``param``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.plans.free_text import without
from textproc.core.constraints.plans.strict_calls import free_reasoning_pattern, strict_calls_pattern
from textproc.core.constraints.regex.parts import lit
from textproc.core.constraints.schema.to_regex import closing_regex
from textproc.core.parsing.declaration import ReasoningFormat
from textproc.core.parsing.formats import REASONING_FORMATS, TOOL_FORMATS
from textproc.errors import InvalidInput
from textproc.options import REASONING_BUDGET_OPTIONAL
from textproc.service.constraints import structured_regex

__all__ = ["ConstraintPlan", "plan_constraint", "strict_tools_pattern", "structured_constraint"]


@dataclasses.dataclass(frozen=True)
class ConstraintPlan:
    """What the output must match and how it is read back.

    ``regex``: the constraint (None: free output); ``param``: the request field a compile
    error names; ``reasoning``: whether the output is parsed for reasoning;
    ``starts_in_reasoning``: the prompt leaves the model inside a reasoning block;
    ``sampling_params``: with a reasoning budget, the request's sampling parameters with it
    turned into what the engine reads (``reasoning_close``, ...), or dropped when it is
    optional and the model marks no reasoning; None when the request has no budget.
    """

    regex: str | None
    param: str
    reasoning: bool
    starts_in_reasoning: bool
    sampling_params: dict[str, Any] | None


def structured_constraint(spec: Any) -> str:
    """The regex of a structured-output spec; a bad spec is an InvalidInput naming
    ``response_format``."""
    try:
        return structured_regex(spec)
    except InvalidInput as e:
        raise InvalidInput(str(e), param="response_format") from e


def plan_constraint(
    *,
    prompt: str,
    tools: Sequence[Mapping[str, Any]],
    tool_choice: str,
    forced_name: str | None,
    structured: Any,
    tool_format: str | None,
    reasoning_format: str | None,
    strict_tools: bool,
    parallel_tool_calls: bool,
    sampling_params: Mapping[str, Any],
) -> ConstraintPlan:
    """What a chat request's output is constrained by (see the module docstring for the order).

    ``prompt``: the rendered prompt (whether it leaves the model inside a reasoning block);
    ``tools`` / ``tool_choice`` / ``forced_name``: as :func:`textproc.options.check_tool_choice`
    returns them; ``structured``: the structured-output spec or None; ``tool_format`` /
    ``reasoning_format``: the model's formats (None: it has none); ``strict_tools``: serve
    ``--strict-tools``. Pure: the same arguments give the same plan.

    >>> plan = plan_constraint(prompt="", tools=[], tool_choice="none", forced_name=None,
    ...                        structured={"choice": ["yes", "no"]}, tool_format="hermes",
    ...                        reasoning_format=None, strict_tools=False,
    ...                        parallel_tool_calls=True, sampling_params={})
    >>> plan.regex, plan.param, plan.reasoning
    ('yes|no', 'response_format', False)
    """
    reasoning = reasoning_format is not None
    rfmt = REASONING_FORMATS[reasoning_format or REASONING_FORMATS.default]
    starts_in_reasoning = reasoning and rfmt.prompt_leaves_open(prompt)
    # A prompt that leaves the model inside reasoning reasons freely first, in the reasoning
    # format's own markup, and closes the block (its close_text): a forced output then
    # follows (else it would be parsed as reasoning).
    lead = (free_reasoning_pattern(rfmt, starts_inside=True, close_text=rfmt.close_text)
            if starts_in_reasoning else "")
    regex = None
    if tool_choice == "required" or forced_name is not None:
        # the call is written in the model's own tool format (the default when none was chosen)
        regex = tool_call_pattern(tools, forced_name, tool_format=tool_format or TOOL_FORMATS.default,
                                  parallel=parallel_tool_calls)
        regex = f"{lead}(?:{regex})" if lead else regex
    elif structured is not None:
        regex = structured_constraint(structured)
        regex = f"{lead}(?:{regex})" if lead else regex
        # the whole output is the structured text (after the reasoning): a <think> inside a
        # JSON string must stay content
        reasoning = starts_in_reasoning
    elif tool_choice == "auto" and tools and tool_format is not None and (
            strict_tools or any(t["function"].get("strict") is True for t in tools)):
        regex = strict_tools_pattern(tools, tool_format, rfmt if reasoning else None,
                                     starts_in_reasoning, parallel=parallel_tool_calls,
                                     close_all=strict_tools)
    params = None
    if "max_reasoning_tokens" in sampling_params:
        params = dict(sampling_params)
        tagged = bool(reasoning_format and rfmt.open_tags and rfmt.close_tags)
        if params.pop(REASONING_BUDGET_OPTIONAL, False) and not tagged:
            del params["max_reasoning_tokens"]  # a cap on reasoning this model does not mark
        else:
            regex, params = _budget(params, regex, rfmt if reasoning_format else None,
                                    starts_in_reasoning)
    return ConstraintPlan(regex, "response_format" if structured is not None else "tools",
                          reasoning, starts_in_reasoning, params)


def strict_tools_pattern(tools: Sequence[Mapping[str, Any]], tool_format: str,
                         rfmt: ReasoningFormat | None, starts_in_reasoning: bool, *,
                         parallel: bool, close_all: bool = False) -> str:
    """The regex of free text with strict calls (every tool enforced once one is strict).
    A ``strict: true`` tool's objects that list properties take no other keys, as OpenAI's
    strict mode requires (``close_all``, ``--strict-tools``: every tool's)."""
    by_name = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object", "properties": {}}
               for t in tools}
    closed = [by_name[t["function"]["name"]] for t in tools if close_all or t["function"].get("strict") is True]
    try:
        return strict_calls_pattern(TOOL_FORMATS[tool_format], by_name, parallel=parallel,
                                    to_regex=closing_regex(closed), reasoning=rfmt,
                                    starts_in_reasoning=starts_in_reasoning)
    except InvalidInput as e:
        raise InvalidInput(f"strict tool calls: {e}", param="tools") from e


def _budget(sampling: dict[str, Any], constraint: str | None, rfmt: ReasoningFormat | None,
            starts_in_reasoning: bool) -> tuple[str | None, dict[str, Any]]:
    """A reasoning budget: the constraint the engine's guide counts in (free reasoning, then
    free text, when the request has none) and the reasoning markup the engine needs to find
    the reasoning states and force the close (see ``core.constraints.plans.reasoning_budget``)."""
    if rfmt is None or not rfmt.open_tags or not rfmt.close_tags:
        raise InvalidInput(
            "max_reasoning_tokens needs a reasoning format with open and close tags; this "
            f"model's is {rfmt.name if rfmt else 'none'} (--reasoning-format)",
            param="max_reasoning_tokens")
    if constraint is None:
        # free text after the block holds no open tag: else "inside a block" and "free text"
        # would be one state of the automaton (a block is text too), and a later block
        # would not be counted. The output may still end inside the block, as it may without
        # a budget: the budget caps the reasoning, it does not make the model close it.
        closed = free_reasoning_pattern(rfmt, starts_inside=starts_in_reasoning) + without(rfmt.open_tags)
        unclosed = without(rfmt.close_tags[:1])
        if not starts_in_reasoning:
            opens = "|".join(lit(t) for t in rfmt.open_tags)
            unclosed = f"[ \\t\\r\\n]*(?:{opens}){unclosed}"
        constraint = f"(?:{closed})|(?:{unclosed})"
    return constraint, {**sampling, "reasoning_close": rfmt.close_text or rfmt.close_tags[0],
                        "reasoning_close_tag": rfmt.close_tags[0], "reasoning_open": list(rfmt.open_tags),
                        "reasoning_starts_inside": starts_in_reasoning}
