"""The OpenAI-compatible HTTP frontend: its own process, a TextClient user.

The process (plumbing, apart from the API): ``run`` (``run_http``, the entry; ``python -m
textproc.http``), ``settings`` (``FrontendSettings`` and ``HttpLimits``, each setting one field
with its flag), ``accept`` (accepting bursts of connections), ``probe`` (a ``/health`` probe
answered on accept), ``connections`` (connection limits and deadlines), ``health`` (the
``--health`` port's process, ``python -m textproc.http.health``), ``frontend_peers``
(``/metrics`` summed over the frontends sharing a port), ``metrics`` (Prometheus text).

The API: ``server`` (routes and the life of a request), ``backend`` (the Protocol the server
needs from the service) and ``client_backend`` (the TextClient adapter), ``asgi`` (SSE, body
limit, API key), ``body_check`` (raw body checks), ``api_types`` (request Structs, validated
parameters, ApiError), ``openai_api`` and ``openai_bodies`` (chat and completion requests and
bodies), ``generation`` (their answers, streamed and whole), ``structured`` (structured-output
fields), ``responses_*`` (``/v1/responses``) and ``messages_*`` (Anthropic's ``/v1/messages``).
Importing this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
