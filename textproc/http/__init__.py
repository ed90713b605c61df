"""The OpenAI-compatible HTTP frontend (issue 5): its own process, a TextClient user.

Modules: ``openai_api`` (pure request validation and response shaping), ``backend`` (the
Protocol the server needs from the service), ``metrics`` (Prometheus text), ``server`` (the
Starlette app, SSE, limits, disconnect -> abort), ``client_backend`` (TextClient adapter) and
``run`` (``run_http``, the process entry). Importing this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
