"""vLLM's admin routes (its ``VLLM_SERVER_DEV_MODE`` routes that operators call), each one engine
call (``TextClient.engine_call``: detokenizer shard 0 relays it to the engine, which runs it on
every engine behind textproc): the same paths, methods, query parameters and answers as
``vllm serve`` 0.32.0 (``vllm/entrypoints/serve/dev/cache``, ``dev/sleep``,
``vllm/entrypoints/rl/online``).

Served only with ``--admin-routes`` (``textproc serve`` turns it on when
``VLLM_SERVER_DEV_MODE=1``, as vLLM does): each can stop the server serving. A bad query
parameter is a 400 naming it (vLLM's validation error); what the engine cannot do comes back
as the engine's 4xx / 501 naming why.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from textproc.engine.calls import PAUSE_MODES
from textproc.http.api_types import ApiError
from textproc.http.asgi import error_response, json_response
from textproc.http.serving import Serving

__all__ = ["admin_routes", "lora_routes"]

_TRUE = ("1", "true", "on", "yes", "t", "y")  # what FastAPI's bool query parameters accept
_FALSE = ("0", "false", "off", "no", "f", "n")


def _bool(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ApiError(f"query parameter {name}={value!r} is not a boolean; use true or false",
                   param=name)


def _mode(request: Request) -> str:
    mode = request.query_params.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise ApiError(f"query parameter mode={mode!r}; allowed: {', '.join(PAUSE_MODES)}",
                       param="mode")
    return mode


def _level(request: Request) -> int:
    text = request.query_params.get("level", "1")
    if not (text.isascii() and text.isdigit() and int(text) <= 2):
        raise ApiError(f"query parameter level={text!r}; allowed: 0, 1 or 2", param="level")
    return int(text)


class AdminRoutes:
    """The routes; each answers vLLM's JSON, or an OpenAI error object."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    async def _call(self, method: str, args: dict[str, Any] | None = None) -> Any:
        return await self.serving.backend.engine_call(method, args or {})

    async def _answer(self, path: str, run: Any) -> Response:
        try:
            body = await run()
        except ApiError as exc:
            self.serving.metrics.count_request(path, exc.status)
            return error_response(exc)
        self.serving.metrics.count_request(path, 200)
        return json_response(body)

    async def reset_prefix_cache(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            args = {"reset_running_requests": _bool(request, "reset_running_requests", False),
                    "reset_connector": _bool(request, "reset_external", False)}
            return {"success": bool(await self._call("reset_prefix_cache", args))}
        return await self._answer("/reset_prefix_cache", run)

    async def sleep(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            level = _level(request)
            await self._call("sleep", {"level": level, "mode": _mode(request)})
            return {"status": "sleeping", "level": level}
        return await self._answer("/sleep", run)

    async def wake_up(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            tags = request.query_params.getlist("tags") or None  # none: every tag
            awake = await self._call("wake_up", {"tags": tags})
            return {"status": "awake" if awake else "sleeping", "tags": tags}
        return await self._answer("/wake_up", run)

    async def is_sleeping(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            return {"is_sleeping": bool(await self._call("is_sleeping"))}
        return await self._answer("/is_sleeping", run)

    async def pause(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            args = {"mode": _mode(request), "clear_cache": _bool(request, "clear_cache", True)}
            await self._call("pause_scheduler", args)
            return {"status": "paused"}
        return await self._answer("/pause", run)

    async def resume(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            await self._call("resume_scheduler")
            return {"status": "resumed"}
        return await self._answer("/resume", run)

    async def is_paused(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            return {"is_paused": bool(await self._call("is_scheduler_paused"))}
        return await self._answer("/is_paused", run)


class LoraRoutes:
    """vLLM's runtime LoRA routes: ``POST /v1/load_lora_adapter`` and
    ``/v1/unload_lora_adapter`` (JSON ``lora_name``, ``lora_path``), answering vLLM's text on
    success and its errors (400 / 404) otherwise."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = msgspec.json.decode(await request.body())
        except msgspec.DecodeError as exc:
            raise ApiError(f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError("the body must be a JSON object")
        return body

    async def _answer(self, path: str, run: Any) -> Response:
        try:
            text = await run()
        except ApiError as exc:
            self.serving.metrics.count_request(path, exc.status)
            return error_response(exc)
        self.serving.metrics.count_request(path, 200)
        return Response(text, status_code=200)

    async def load(self, request: Request) -> Response:
        async def run() -> str:
            body = await self._body(request)
            name, path = body.get("lora_name"), body.get("lora_path")
            if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
                raise ApiError("Both 'lora_name' and 'lora_path' must be provided.")
            backend = self.serving.backend
            if name in backend.served_models and name not in backend.lora_modules:
                raise ApiError(f"The lora adapter '{name}' conflicts with a served base model.")
            if name in backend.lora_modules:
                raise ApiError(f"The lora adapter '{name}' has already been loaded.")
            await backend.engine_call("load_lora_adapter", {"lora_name": name,
                                                            "lora_path": path})
            backend.add_lora(name, path)
            return f"Success: LoRA adapter '{name}' added successfully."
        return await self._answer("/v1/load_lora_adapter", run)

    async def unload(self, request: Request) -> Response:
        async def run() -> str:
            body = await self._body(request)
            name = body.get("lora_name")
            if not isinstance(name, str) or not name:
                raise ApiError("'lora_name' needs to be provided to unload a LoRA adapter.")
            backend = self.serving.backend
            if name not in backend.lora_modules:
                raise ApiError(f"The lora adapter '{name}' cannot be found.", status=404,
                               type="NotFoundError")
            await backend.engine_call("unload_lora_adapter", {"lora_name": name})
            backend.remove_lora(name)
            return f"Success: LoRA adapter '{name}' removed successfully."
        return await self._answer("/v1/unload_lora_adapter", run)


def lora_routes(serving: Serving) -> list[Route]:
    """vLLM's runtime LoRA routes over ``serving``'s backend."""
    lora = LoraRoutes(serving)
    return [Route("/v1/load_lora_adapter", lora.load, methods=["POST"]),
            Route("/v1/unload_lora_adapter", lora.unload, methods=["POST"])]


def admin_routes(serving: Serving) -> list[Route]:
    """vLLM's admin routes over ``serving``'s backend."""
    admin = AdminRoutes(serving)
    return [
        Route("/reset_prefix_cache", admin.reset_prefix_cache, methods=["POST"]),
        Route("/sleep", admin.sleep, methods=["POST"]),
        Route("/wake_up", admin.wake_up, methods=["POST"]),
        Route("/is_sleeping", admin.is_sleeping, methods=["GET"]),
        Route("/pause", admin.pause, methods=["POST"]),
        Route("/resume", admin.resume, methods=["POST"]),
        Route("/is_paused", admin.is_paused, methods=["GET"]),
    ]
