"""The registry of tool-call and reasoning formats: name -> how its text is recognised.

Owns the names users and the format detection pick (``tool_format=`` / ``reasoning_format=``
of :class:`OutputParser`, ``--tool-format`` / ``--reasoning-format`` of ``textproc serve``) and,
per format, the tags that open a tool-call section in content, the body that parses the section
(:mod:`textproc.core.parsing.section`), and the special tokens the parser must see in its input
even when the client asked to skip special tokens (``KEEP_SPECIALS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from textproc.core.parsing import deepseek, kimi_k2
from textproc.core.parsing.deepseek import deepseek_v3_body, deepseek_v31_body
from textproc.core.parsing.glm import glm_body
from textproc.core.parsing.hermes import hermes_body
from textproc.core.parsing.kimi_k2 import kimi_k2_body
from textproc.core.parsing.llama3 import llama3_json_body
from textproc.core.parsing.mistral import json_list_body, mistral_body
from textproc.core.parsing.pythonic import PYTHON_END, PYTHON_START, pythonic_body
from textproc.core.parsing.qwen3_coder import qwen3_coder_body
from textproc.core.parsing.section import Body

__all__ = ["ToolFormat", "ReasoningFormat", "TOOL_FORMATS", "REASONING_FORMATS", "HARMONY"]

HARMONY = "gpt_oss"  # the tool and reasoning format parsed by HarmonyParser as a whole


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes tool calls.

    ``open_tags``: text in content that starts a call section (the body parses what follows);
    ``start_chars``: a section may also start with one of these characters as the first
    non-space character of the answer (the character is part of the section);
    ``ends_reasoning``: an open tag also ends an open reasoning block (Kimi K2);
    ``specials``: special tokens of the format the detokenizer must keep for the parser.
    """

    name: str
    open_tags: tuple[str, ...]
    body: Body | None
    start_chars: str = ""
    ends_reasoning: bool = False
    specials: tuple[str, ...] = ()
    raw_values: bool = False  # argument values are raw text, typed by tool_schemas


@dataclass(frozen=True)
class ReasoningFormat:
    """How one family writes reasoning: open tags, close tags, and whether the answer starts
    inside reasoning whatever the prompt says (DeepSeek R1 opens ``<think>`` in the prompt)."""

    name: str
    open_tags: tuple[str, ...]
    close_tags: tuple[str, ...]
    starts_in_reasoning: bool = False
    specials: tuple[str, ...] = ()


_DS = (deepseek.CALLS_BEGIN, deepseek.CALLS_END, deepseek.CALL_BEGIN, deepseek.CALL_END, deepseek.SEP)
_KIMI = (kimi_k2.SECTION_BEGIN, kimi_k2.SECTION_BEGIN_ALT, kimi_k2.SECTION_END, kimi_k2.SECTION_END_ALT,
         kimi_k2.CALL_BEGIN, kimi_k2.ARGS_BEGIN, kimi_k2.CALL_END)
_HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")

TOOL_FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        ToolFormat("hermes", ("<tool_call>",), hermes_body(), specials=("<tool_call>", "</tool_call>")),
        ToolFormat("qwen3_coder", ("<tool_call>",), qwen3_coder_body,
                   specials=("<tool_call>", "</tool_call>"), raw_values=True),
        ToolFormat("llama3_json", ("<|python_tag|>",), llama3_json_body, start_chars="{",
                   specials=("<|python_tag|>",)),
        ToolFormat("pythonic", (PYTHON_START,), pythonic_body, start_chars="[",
                   specials=(PYTHON_START, PYTHON_END)),
        ToolFormat("mistral", ("[TOOL_CALLS]",), mistral_body,
                   specials=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")),
        ToolFormat("deepseek_v3", (deepseek.CALLS_BEGIN,), deepseek_v3_body, specials=_DS),
        ToolFormat("deepseek_v31", (deepseek.CALLS_BEGIN,), deepseek_v31_body, specials=_DS),
        ToolFormat("kimi_k2", (kimi_k2.SECTION_BEGIN, kimi_k2.SECTION_BEGIN_ALT), kimi_k2_body,
                   ends_reasoning=True, specials=_KIMI),
        ToolFormat("glm45", ("<tool_call>",), glm_body, raw_values=True,
                   specials=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
        ToolFormat("glm47", ("<tool_call>",), glm_body, raw_values=True,
                   specials=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
        ToolFormat("granite", ("<|tool_call|>", "<tool_call>"), json_list_body, specials=("<|tool_call|>",)),
        ToolFormat(HARMONY, (), None, specials=_HARMONY),
    )
}

REASONING_FORMATS: dict[str, ReasoningFormat] = {
    f.name: f
    for f in (
        ReasoningFormat("think", ("<think>",), ("</think>",), specials=("<think>", "</think>")),
        ReasoningFormat("deepseek_r1", ("<think>",), ("</think>",), starts_in_reasoning=True,
                        specials=("<think>", "</think>")),
        ReasoningFormat("mistral", ("[THINK]",), ("[/THINK]",), specials=("[THINK]", "[/THINK]")),
        ReasoningFormat("granite", ("Here is my thought process:", "Here's my thought process:"),
                        ("Here is my response:", "Here's my response:")),
        ReasoningFormat(HARMONY, (), (), specials=_HARMONY),
    )
}
