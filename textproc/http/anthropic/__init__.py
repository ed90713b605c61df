"""Anthropic's Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``, a chat
request underneath.

``routes`` (the handlers over a ``serving.Serving``, errors in Anthropic's shape, the context
window's room), ``bodies`` (request body -> the chat request it is; Anthropic's error body),
``answers`` (deltas -> content blocks and Anthropic's events: ``MessageBuilder``), ``events``
(a run's outputs -> the answer, streamed and whole).
"""

from __future__ import annotations

__all__: list[str] = []
