"""One tool call written the way each family's chat template writes it (tests and bench).

``render(fmt, name, args)`` gives the text of one call of tool ``name`` with the arguments
object ``args`` in tool format ``fmt`` (a ``textproc.core.parsing.TOOL_FORMATS`` name): the
format declaration's call spelling, which the real templates' own rendering of assistant tool
calls is checked against (tests/unit/test_parsing_detect.py).
"""

from __future__ import annotations

from typing import Any

from textproc.core.parsing import TOOL_FORMATS

__all__ = ["render"]


def render(fmt: str, name: str, args: dict[str, Any]) -> str:
    """One call as the family's chat template writes it."""
    return TOOL_FORMATS[fmt].calls.render([(name, args)])
