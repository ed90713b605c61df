"""The route of OpenAI's Responses API, ``POST /v1/responses``.

Owns the handler (parse with ``bodies``, start and answer through the shared
:class:`textproc.http.serving.Serving`, answer with ``events``) and the ``previous_response_id``
store it reads and writes: one per app, with the reasoning items' seal (one secret per service,
kept in its runtime dir, so every frontend opens what any sealed).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from textproc.http.openai.answers import new_id
from textproc.http.responses.bodies import ResponseStore, parse_responses_request
from textproc.http.responses.events import respond_events, respond_whole
from textproc.http.responses.reasoning import ReasoningSeal
from textproc.http.serving import Serving, header_priority

__all__ = ["ResponsesRoutes"]


class ResponsesRoutes:
    """The Responses handler over one ``Serving``, with the store of finished responses."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving
        # previous_response_id (bounds in responses.bodies)
        self.store = ResponseStore(
            seal=ReasoningSeal.for_service(getattr(serving.backend, "runtime_dir", None)))

    async def create(self, request: Request) -> Response:
        return await self.serving.guard("/v1/responses", request, self._create)

    async def _create(self, request: Request, body: bytes) -> Response:
        serving = self.serving
        req = parse_responses_request(body, served_models=serving.backend.served_models,
                                      store=self.store)
        header_priority(request, req.chat)
        serving.use_adapter(req.chat)
        await serving.load_images(req.chat)
        rid = new_id("resp")
        run, first = await serving.start(
            request, lambda: serving.backend.chat(req.chat, request_id=rid))
        store = self.store
        return await serving.respond(
            request, run, req.chat.stream,
            lambda: respond_events(req, rid, run, first, store),
            lambda: respond_whole(req, rid, run, first, store),
        )
