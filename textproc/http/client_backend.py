"""The HTTP frontend's Backend over ``textproc.client.TextClient`` (the real service).

Owns the translation between the API's validated parameters and TextClient calls, TextClient
events and the frontend's ``Output``, and TextClient errors and ``ApiError`` (the status the
worker put in its Failure: 400 bad input, 503 overloaded or a process died, 500 internal).
Closing an Output stream closes the TextClient stream, which aborts the request in the engine.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

from textproc.client import TextClient, TextEvent
from textproc.errors import TextprocError
from textproc.http.backend import Output
from textproc.http.engine_ranks import EngineRanks
from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.options import SamplingOptions

__all__ = ["ClientBackend", "api_error", "STATS_TIMEOUT_S"]

_log = logging.getLogger("textproc.http")
STATS_TIMEOUT_S = 1.0  # /metrics waits this long for every process's counters
# an admin route waits this long for the engine (a pause or sleep in "wait" mode lasts until
# the running requests end)
ENGINE_CALL_TIMEOUT_S = 600.0


def api_error(exc: TextprocError) -> ApiError:
    """The API error for a TextClient failure (status from the worker's Failure when it set one)."""
    if isinstance(exc, ApiError):
        return exc
    status = exc.status
    if status < 500:
        return ApiError(str(exc), status=status, param=exc.param, code=exc.kind)
    code = "service_unavailable" if status == 503 else "internal_error"
    return ApiError(str(exc), status=status, type="server_error", code=code)


class ClientBackend:
    """A Backend on one TextClient; ``await start()`` inside the serving loop before use."""

    def __init__(self, runtime_dir: str | Path, *, served_model_name: str | None = None,
                 connect_timeout_s: float = 60.0, curve_client_key: str | Path | None = None,
                 curve_server_key: str | Path | None = None,
                 engine_stats_file: str | None = None,
                 lora_modules: Mapping[str, str] | None = None) -> None:
        self.runtime_dir = Path(runtime_dir)
        self.engine_ranks = EngineRanks(engine_stats_file)
        self.curve_client_key = curve_client_key  # CURVE keys (a service with --curve-dir on
        self.curve_server_key = curve_server_key  # another host); default: endpoints.json's
        self.connect_timeout_s = connect_timeout_s
        self._served_model_name = served_model_name
        self._models: list[str] = [served_model_name] if served_model_name else []
        self._loras = dict(lora_modules or {})  # adapter name -> its path
        self._max_model_len: int | None = None
        self.reads_images = True  # from endpoints.json: False for a model without vision_config
        self.client: TextClient | None = None
        self._closed = False

    async def start(self) -> None:
        self.client = await TextClient.connect(self.runtime_dir, timeout_s=self.connect_timeout_s,
                                               curve_client_key=self.curve_client_key,
                                               curve_server_key=self.curve_server_key)
        info = self.client.info
        if not self._models:
            self._models = [Path(str(info.get("model_dir", "model"))).name or "model"]
        self._models += [name for name in self._loras if name not in self._models]
        max_len = info.get("max_model_len")
        self._max_model_len = max_len if isinstance(max_len, int) else None
        self.reads_images = info.get("reads_images") is not False  # unsaid: the worker decides

    async def close(self) -> None:
        self._closed = True
        if self.client is not None:
            await self.client.close()

    @property
    def served_models(self) -> Sequence[str]:
        return self._models

    @property
    def lora_modules(self) -> Mapping[str, str]:
        return self._loras

    def add_lora(self, name: str, path: str) -> None:
        self._loras[name] = path
        if name not in self._models:
            self._models.append(name)

    def remove_lora(self, name: str) -> None:
        self._loras.pop(name, None)
        if name in self._models[1:]:
            self._models.remove(name)

    @property
    def max_model_len(self) -> int | None:
        return self._max_model_len

    def _client(self) -> TextClient:
        if self.client is None or self._closed:
            raise ApiError("the frontend is not connected to the service", status=503,
                           type="server_error", code="service_unavailable")
        return self.client

    def chat(self, params: ChatParams, *, request_id: str) -> AsyncIterator[Output]:
        return self._outputs(lambda client: client.chat(
            params.messages, **_chat_args(params), request_id=request_id))

    def complete(self, params: CompletionParams, *, request_id: str) -> AsyncIterator[Output]:
        return self._outputs(lambda client: client.complete(
            params.prompt, sampling=params.sampling, output=params.output,
            structured=params.structured, request_id=request_id))

    async def render(self, params: ChatParams | CompletionParams) -> tuple[list[int],
                                                                          SamplingOptions]:
        client = self._client()
        frame = (client.chat_request(params.messages, **_chat_args(params))
                 if isinstance(params, ChatParams) else
                 client.completion_request(params.prompt, sampling=params.sampling,
                                           output=params.output, structured=params.structured))
        try:
            return await client.render_only(frame)
        except TextprocError as exc:
            raise api_error(exc) from exc

    async def _outputs(self, start: Any) -> AsyncIterator[Output]:
        events: AsyncIterator[TextEvent] = start(self._client())
        try:
            async for event in events:
                usage = event.usage
                yield Output(
                    event.deltas,
                    finish_reason=event.finish_reason,
                    prompt_tokens=usage.prompt_tokens if usage else 0,
                    completion_tokens=usage.completion_tokens if usage else 0,
                    stop=event.stop,
                    cached_tokens=usage.cached_tokens if usage else 0,
                    timings_s=event.timings,
                    index=event.index,
                    logprobs=event.logprobs,
                    token_ids=event.token_ids,
                    id_logprobs=event.id_logprobs,
                    id_top_ids=event.id_top_ids,
                )
        except TextprocError as exc:
            raise api_error(exc) from exc
        finally:
            # closing the TextClient stream before its end sends Abort to the detokenizer
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def derender(self, params: ChatParams, token_ids: list[int],
                       finish_reason: str | None, *, skip: int = 0,
                       ) -> tuple[list[dict[str, Any]], str | None, str | None]:
        client = self._client()
        try:
            return await client.derender(client.chat_request(params.messages, **_chat_args(params)),
                                         token_ids, finish_reason, skip=skip)
        except TextprocError as exc:
            raise api_error(exc) from exc

    async def tokenize(self, *, text: str | None, messages: list[dict[str, Any]] | None,
                       tools: list[dict[str, Any]] | None, add_special_tokens: bool,
                       add_generation_prompt: bool,
                       chat_template_kwargs: dict[str, Any]) -> list[int]:
        try:
            return await self._client().tokenize(
                text, messages=messages, tools=tools, add_special_tokens=add_special_tokens,
                add_generation_prompt=add_generation_prompt,
                chat_template_kwargs=chat_template_kwargs)
        except TextprocError as exc:
            raise api_error(exc) from exc

    async def detokenize(self, token_ids: list[int], *, skip_special_tokens: bool) -> str:
        try:
            return await self._client().detokenize(token_ids,
                                                   skip_special_tokens=skip_special_tokens)
        except TextprocError as exc:
            raise api_error(exc) from exc

    def queue_depths(self) -> Mapping[str, int]:
        depths = self.client.queue_depths() if self.client is not None else []
        return {f"worker-{i}": n for i, n in enumerate(depths)}

    def worker_requests(self) -> Sequence[int]:
        return self.client.worker_requests() if self.client is not None else []

    async def process_counters(self) -> Sequence[tuple[str, int, Mapping[str, int]]]:
        if self.client is None or self._closed:
            return []
        try:
            stats = await self.client.stats(timeout_s=STATS_TIMEOUT_S)
        except TextprocError as exc:  # a process is restarting: scrape again later
            _log.warning("process counters unavailable: %s", exc)
            return []
        return [(s.role, s.index, s.counters) for s in stats]

    def engine_stats(self) -> Mapping[str, Any]:
        self.engine_ranks.check()  # reads the file again if it changed
        return self.engine_ranks.stats

    async def engine_call(self, method: str, args: dict[str, Any]) -> Any:
        try:
            answer = await self._client().engine_call(method, args,
                                                      timeout_s=ENGINE_CALL_TIMEOUT_S)
        except TextprocError as exc:
            raise ApiError(str(exc), status=504, type="server_error") from exc
        if answer.error:
            raise ApiError(answer.error, status=answer.status,
                           type="invalid_request_error" if answer.status < 500 else "server_error")
        return answer.result

    def health(self) -> tuple[bool, str]:
        if self._closed:
            return False, "the frontend is shutting down"
        if self.client is None:
            return False, "the frontend is still connecting to the service"
        if self.client.detok_instance is None:
            return False, "waiting for the detokenizer"
        if self.client.engine_down is not None:
            return False, self.client.engine_down
        return self.engine_ranks.check()


def _chat_args(params: ChatParams) -> dict[str, Any]:
    """A chat request's TextClient arguments besides its messages (``chat`` and ``render``)."""
    return dict(tools=params.tools, tool_choice=params.tool_choice, sampling=params.sampling,
                output=params.output, structured=params.structured,
                chat_template_kwargs=params.chat_template_kwargs,
                add_generation_prompt=params.add_generation_prompt,
                continue_final_message=params.continue_final_message,
                documents=params.documents, images=[image.data for image in params.images],
                image_params=[image.param for image in params.images])
