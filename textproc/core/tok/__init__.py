"""Private building blocks of :class:`textproc.core.tokenizer.Tokenizer` (tokenizer.json components).

Nothing here is public API: import :class:`textproc.Tokenizer` instead. Every module is pure
Python (stdlib + ``regex``) and does no I/O except :mod:`textproc.core.tok.loader` reading the files
it was handed.
"""

from __future__ import annotations

__all__: list[str] = []
