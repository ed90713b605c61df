"""Chat and completion answers from a generation run: SSE chunks when streamed, one JSON body when whole.

Each loop takes the request's first ``Output`` and the run it came from, feeds every output to
``run.observe`` (the server's accounting) and ends when all ``n`` choices have finished; an
``error`` finish becomes the ApiError of ``backend.generation_error`` (the whole answer raises
it, a stream sends it as an error event, then ``[DONE]``). Response shapes come from
``answers`` and text folding from ``core.deltas``; it starts, limits and closes nothing
(``serving.Serving`` does).
"""

from __future__ import annotations

from typing import Any, AsyncIterator

from starlette.responses import Response

from textproc.core.deltas import MessageAccumulator, join_text
from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.http.asgi import LastEvents, json_response
from textproc.http.backend import Output, Run, generation_error, no_finish_error
from textproc.http.openai.answers import (
    SSE_DONE,
    ChoiceEnds,
    CompletionLogprobs,
    chat_chunk,
    chat_logprobs,
    chat_response,
    completion_chunk,
    completion_response,
    new_id,
    now,
    sse_event,
    usage_chunk,
)

__all__ = ["chat_events", "chat_whole", "completion_events", "completion_whole"]


async def chat_whole(params: ChatParams, rid: str, run: Run, first: Output) -> Response:
    """The whole chat.completion object once every choice has finished."""
    accs = [MessageAccumulator() for _ in range(params.sampling.n)]
    entries: list[list[Any]] = [[] for _ in range(params.sampling.n)]  # logprob entries per choice
    ends = ChoiceEnds(params.sampling.n)
    out: Output | None = first
    while out is not None:
        run.observe(out)
        accs[out.index].feed(out.deltas)
        if out.logprobs:
            entries[out.index] += out.logprobs
        if out.finish_reason is not None:
            if out.finish_reason == "error":
                raise generation_error(out)
            if ends.finish(out):  # "tool_calls" already decided by the pipeline
                choices = [(acc.message(new_call_id=lambda: new_id("call")), reason)
                           for acc, reason in zip(accs, ends.reasons)]
                logprobs = ([chat_logprobs(e, params.output) for e in entries]
                            if params.output.logprobs is not None else [])
                return json_response(chat_response(rid, now(), params.model, choices,
                                                   ends.usage(), logprobs))
        out = await run.next()
    raise no_finish_error()


async def chat_events(params: ChatParams, rid: str, run: Run,
                      first: Output) -> AsyncIterator[bytes]:
    """The chat.completion.chunk stream as SSE bytes, ending with ``[DONE]`` (also after an
    error event when the request fails mid-stream). The chunks of one output go out together
    (``EventStream``: one write), the role chunk with the first's, the last with the end."""
    created = now()
    model = params.model
    usage = params.include_usage
    parts: list[bytes] = []
    try:
        for index in range(params.sampling.n):
            parts.append(sse_event(chat_chunk(rid, created, model,
                                              {"role": "assistant", "content": ""},
                                              include_usage=usage, index=index)))
        ends = ChoiceEnds(params.sampling.n)
        out: Output | None = first
        while out is not None:
            run.observe(out)
            # an output's logprob entries ride on its first chunk (a chunk of their own,
            # delta {}, when the text they belong to is still held by the parser)
            lp = chat_logprobs(out.logprobs, params.output) if out.logprobs else None
            for frag in join_text(out.deltas):
                parts.append(sse_event(chat_chunk(rid, created, model, frag,
                                                  include_usage=usage, index=out.index,
                                                  logprobs=lp)))
                lp = None
            if out.finish_reason is not None:
                if out.finish_reason == "error":
                    raise generation_error(out)
                parts.append(sse_event(chat_chunk(rid, created, model, {},
                                                  finish_reason=out.finish_reason,
                                                  include_usage=usage, index=out.index,
                                                  logprobs=lp)))
                if ends.finish(out):
                    if usage:
                        parts.append(sse_event(usage_chunk(rid, created, model, ends.usage())))
                    parts.append(SSE_DONE)
                    yield LastEvents(b"".join(parts))
                    return
            elif lp is not None:
                parts.append(sse_event(chat_chunk(rid, created, model, {}, include_usage=usage,
                                                  index=out.index, logprobs=lp)))
            if parts:
                yield b"".join(parts)
                parts = []
            out = await run.next()
        raise no_finish_error()
    except ApiError as exc:  # failed mid-stream (worker died, engine error): say so, then end
        yield LastEvents(b"".join([*parts, sse_event(exc.body()), SSE_DONE]))


async def completion_whole(params: CompletionParams, rid: str, run: Run,
                           first: Output) -> Response:
    """The whole text_completion object once every choice has finished."""
    echo = [params.prompt] if params.echo and isinstance(params.prompt, str) else []
    texts = [list(echo) for _ in range(params.sampling.n)]
    entries: list[list[Any]] = [[] for _ in range(params.sampling.n)]  # logprob entries per choice
    ends = ChoiceEnds(params.sampling.n)
    out: Output | None = first
    while out is not None:
        run.observe(out)
        texts[out.index].extend(f["content"] for f in out.deltas if "content" in f)
        if out.logprobs:
            entries[out.index] += out.logprobs
        if out.finish_reason is not None:
            if out.finish_reason == "error":
                raise generation_error(out)
            if ends.finish(out):
                logprobs = ([CompletionLogprobs(params.output).feed(e) for e in entries]
                            if params.output.logprobs is not None else [])
                return json_response(completion_response(
                    rid, now(), params.model,
                    [("".join(t), reason) for t, reason in zip(texts, ends.reasons)],
                    ends.usage(), logprobs))
        out = await run.next()
    raise no_finish_error()


async def completion_events(params: CompletionParams, rid: str, run: Run,
                            first: Output) -> AsyncIterator[bytes]:
    """The streamed text_completion chunks (with ``echo``, the prompt first) as SSE bytes;
    ``[DONE]`` comes last, after an error event too when the request fails mid-stream. The
    chunks of one output go out together, as in ``chat_events``."""
    created = now()
    model = params.model
    usage = params.include_usage
    parts: list[bytes] = []
    try:
        if params.echo and isinstance(params.prompt, str):
            for index in range(params.sampling.n):
                parts.append(sse_event(completion_chunk(rid, created, model, params.prompt,
                                                        include_usage=usage, index=index)))
        ends = ChoiceEnds(params.sampling.n)
        # text_offset per choice
        offsets = [CompletionLogprobs(params.output) for _ in range(params.sampling.n)]
        out: Output | None = first
        while out is not None:
            run.observe(out)
            text = "".join(f["content"] for f in out.deltas if "content" in f)
            lp = offsets[out.index].feed(out.logprobs) if out.logprobs else None
            if text or lp is not None:
                parts.append(sse_event(completion_chunk(rid, created, model, text,
                                                        include_usage=usage, index=out.index,
                                                        logprobs=lp)))
            if out.finish_reason is not None:
                if out.finish_reason == "error":
                    raise generation_error(out)
                parts.append(sse_event(completion_chunk(rid, created, model, "",
                                                        finish_reason=out.finish_reason,
                                                        include_usage=usage, index=out.index)))
                if ends.finish(out):
                    if usage:
                        parts.append(sse_event(usage_chunk(rid, created, model, ends.usage(),
                                                           chat=False)))
                    parts.append(SSE_DONE)
                    yield LastEvents(b"".join(parts))
                    return
            if parts:
                yield b"".join(parts)
                parts = []
            out = await run.next()
        raise no_finish_error()
    except ApiError as exc:
        yield LastEvents(b"".join([*parts, sse_event(exc.body()), SSE_DONE]))
