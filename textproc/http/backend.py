"""What the HTTP frontend needs from the service, as a typing.Protocol, plus its output record.

Owns the seam between the HTTP layer and ``textproc.client.TextClient``: the server codes
against :class:`Backend`; ``textproc.http.client_backend.ClientBackend`` adapts the real TextClient and
tests may pass any object with the same methods. Cancelling (``aclose`` or cancelling the task
that iterates) a stream returned by ``chat``/``complete`` must abort the request in the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping, Protocol, Sequence

from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.options import SamplingOptions

__all__ = ["Backend", "Output", "Run", "generation_error", "no_finish_error"]


@dataclass(slots=True)
class Output:
    """One step of one request, as the frontend consumes it.

    ``deltas`` are OpenAI deltas in order; the last Output of each choice has
    ``finish_reason`` set and the usage counts (the prompt's, and that choice's tokens). ``timings_s`` holds stage -> seconds for the
    stages the service reports (template, tokenize, queue, detokenize), when it does.
    """

    deltas: list[dict[str, Any]]
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop: str | None = None
    # of prompt_tokens, how many the engine found in its prefix cache (with the usage)
    cached_tokens: int = 0
    error: str | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    index: int = 0  # the choice (0..n-1) of a request with n > 1
    # with logprobs: the entries of the tokens this output's text came from
    # (textproc.core.logprobs.Entry: token id, bytes, logprob, alternatives)
    logprobs: list[Any] = field(default_factory=list)
    # with output.return_token_ids: the engine's ids since the previous Output of this choice
    token_ids: list[int] = field(default_factory=list)
    # ... and with output.logprobs = k: 1 + k logprobs per id (its own, then its k
    # alternatives'), and the alternatives' ids, k per id (TextEvent.id_logprobs / id_top_ids)
    id_logprobs: list[float] = field(default_factory=list)
    id_top_ids: list[int] = field(default_factory=list)


class Run(Protocol):
    """What the answer loops (``openai.events``, ``responses.events``, ``anthropic.events``) need of the server's
    request in flight: its next Output (None at the end) and the accounting of each one."""

    async def next(self) -> Output | None: ...

    def observe(self, out: Output) -> None: ...


def generation_error(out: Output) -> ApiError:
    """The 500 for an Output that finished with reason "error"."""
    return ApiError(f"generation failed: {out.error or 'unknown error'}", status=500,
                    type="server_error", code="generation_error")


def no_finish_error() -> ApiError:
    """The 500 for a stream that ended without a finish reason."""
    return ApiError("the service ended the request without a finish reason", status=500,
                    type="server_error")


class Backend(Protocol):
    """The service as the HTTP frontend sees it. Errors are raised as ``ApiError``."""

    @property
    def served_models(self) -> Sequence[str]: ...

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def lora_modules(self) -> Mapping[str, str]:
        """The LoRA adapters among ``served_models``: name -> the path the engine loads."""
        ...

    def chat(self, params: ChatParams, *, request_id: str) -> AsyncIterator[Output]:
        """Outputs of one chat request; the first may be an empty Output sent on acceptance.

        Raises ApiError (from the first ``__anext__``) when the service refuses the request.
        """
        ...

    def complete(self, params: CompletionParams, *, request_id: str) -> AsyncIterator[Output]:
        ...

    async def render(self, params: ChatParams | CompletionParams) -> tuple[list[int],
                                                                          SamplingOptions]:
        """What ``chat`` / ``complete`` would send the engine for ``params``, not submitted:
        the prompt's ids, and the sampling with the model's defaults and max_tokens resolved.
        Bad input raises the ApiError the generation request would get."""
        ...

    async def derender(self, params: ChatParams, token_ids: list[int],
                       finish_reason: str | None, *, skip: int = 0,
                       ) -> tuple[list[dict[str, Any]], str | None, str | None]:
        """The output ``token_ids`` make for the chat request ``params`` (its stops, special
        tokens and parsing, as the chat route's): (deltas, finish reason, matched stop), less
        what the first ``skip`` ids make."""
        ...

    async def tokenize(
        self,
        *,
        text: str | None,
        messages: list[dict[str, Any]] | None,
        tools: list[dict[str, Any]] | None,
        add_special_tokens: bool,
        add_generation_prompt: bool,
        chat_template_kwargs: dict[str, Any],
    ) -> list[int]: ...

    async def detokenize(self, token_ids: list[int], *, skip_special_tokens: bool) -> str: ...

    def queue_depths(self) -> Mapping[str, int]: ...

    def worker_requests(self) -> Sequence[int]:
        """Requests sent to each tokenizer worker so far, by worker index."""
        ...

    async def process_counters(self) -> Sequence[tuple[str, int, Mapping[str, int]]]:
        """(role, index, counters) of every service process; empty when they do not answer."""
        ...

    def engine_stats(self) -> Mapping[str, Any]:
        """The engine's last stats (its stats file: scheduler state, ranks), {} without one."""
        ...

    def add_lora(self, name: str, path: str) -> None:
        """Serve adapter ``name`` (the engine loaded it from ``path``) from now on."""
        ...

    def remove_lora(self, name: str) -> None:
        """Serve adapter ``name`` no more (the engine forgot it)."""
        ...

    async def engine_call(self, method: str, args: dict[str, Any]) -> Any:
        """The result of engine method ``method`` (``textproc.engine.calls.ENGINE_CALLS``) on
        every engine; ApiError with the engine's status when it refuses."""
        ...

    def health(self) -> tuple[bool, str]:
        """(serving, why not): False while the service is down or still starting; serving,
        what part is down (of several engines, the ranks not ready), else ''."""
        ...
