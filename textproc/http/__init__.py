"""The OpenAI-compatible HTTP frontend: its own process, a TextClient user.

The process (plumbing, apart from the API): ``run`` (``run_http``, the entry; ``python -m
textproc.http``), ``settings`` (``FrontendSettings`` and ``HttpLimits``, each setting one field
with its flag), ``accept`` (accepting bursts of connections), ``probe`` (a ``/health`` probe
answered on accept), ``connections`` (connection limits and deadlines), ``health`` (the
``--health`` port's process, ``python -m textproc.http.health``), ``metrics`` (the
Prometheus families through prometheus_client, summed over the frontends sharing a port).

The APIs, one folder each with the same file names (``routes``: the handlers; ``bodies``:
request body -> validated parameters; ``answers``: the answer's shapes, pure; ``events``: a
run's outputs -> the answer, streamed and whole): ``openai/`` (chat and text completions,
models, tokenize; ``structured``: structured-output fields), ``responses/`` (``/v1/responses``; ``tools``,
``reasoning``) and ``anthropic/`` (``/v1/messages``). What every route shares: ``serving``
(``Serving``: the guard, start, respond and serving checks; ``InFlight``: one request in
flight), ``backend`` (the Protocol the routes need from the service) and ``client_backend``
(the TextClient adapter), ``asgi`` (SSE, body limit, API key), ``body_check`` (raw body
checks), ``api_types`` (the OpenAI body Structs every API maps onto, ``ChatParams``,
``ApiError``). ``server`` only assembles the app from the folders' routes (and serves
``/health`` and ``/metrics``).
Importing this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
