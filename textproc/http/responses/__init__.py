"""OpenAI's Responses API, ``POST /v1/responses``: a chat request underneath.

``routes`` (the handler over a ``serving.Serving``, and the ``previous_response_id`` store),
``bodies`` (request body -> the chat request it is, and the store), ``tools`` (function and
namespace tools offered, tools it cannot run named in ``warnings``), ``reasoning`` (reasoning
items sealed into ``encrypted_content``), ``answers`` (deltas -> output items and semantic events:
``ResponseBuilder``), ``events`` (a run's outputs -> the answer, streamed and whole).
"""

from __future__ import annotations

__all__: list[str] = []
