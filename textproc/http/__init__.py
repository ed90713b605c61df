"""The OpenAI-compatible HTTP frontend: its own process, a TextClient user.

Modules: ``api_types`` (request Structs, validated parameters, ApiError), ``openai_api`` (pure
request validation), ``responses`` (pure response shaping and SSE framing), ``backend`` (the
Protocol the server needs from the service), ``metrics`` (Prometheus text), ``asgi`` (SSE
response, disconnect watching, body limit, API key), ``server`` (routes and the life of a
request), ``generation`` (chat and completion answers, streamed and whole), ``client_backend`` (the TextClient adapter), ``health`` (the ``--health`` port's
process, ``python -m textproc.http.health``), ``peers`` (``/metrics`` summed over the frontends sharing a port), ``accept`` (accepting
bursts of connections), ``probe`` (a ``/health`` probe answered on accept) and ``run``
(``run_http``, the process entry; ``python -m textproc.http``). Importing this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
