"""What building a prompt needs from a tokenizer, as a typing.Protocol.

The service's request builder takes a :class:`PromptTokenizer`, so any tokenizer with these
members can serve; :class:`textproc.core.tokenizer.Tokenizer` is the one textproc has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from textproc.core.tok.segments import SegmentCache

__all__ = ["PromptTokenizer"]


class PromptTokenizer(Protocol):
    """What building a prompt and checking ids needs from a tokenizer (:class:`Tokenizer` has it).

    The service's request builder takes this, so any tokenizer with these members can serve.
    """

    vocab_size: int
    eos_token_id: int | None
    added_tokens: dict[str, int]  # added token content -> id
    special_ids: frozenset[int]
    special_tokens_map: dict[str, str]  # e.g. "eos_token" -> "<|im_end|>", for templates
    chat_template: str | dict[str, str] | None
    segment_cache: SegmentCache  # its counters go into the worker's Stats

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]: ...

    def encode_specials_as_text(self, text: str, *, at_start: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...
