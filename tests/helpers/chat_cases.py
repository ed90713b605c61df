"""The concurrent chat mix the service tests send, and what the in-process core says it must give.

``make_case(i, rng)`` is request ``i`` of the mix (stop strings, tool calls, reasoning, prompts
that open ``<think>``, long prompts, emoji and CJK); ``expected(tok, case, rid)`` is its answer
computed in-process with the text core (the echo engine answers with the last user message);
``chat_cases`` sends every case as one concurrent chat; ``collect`` drains a stream.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from textproc.client import TextClient, TextEvent
from textproc.core.chat.template import prompt_starts_in_reasoning, render_chat
from textproc.core.parsing import parse_output
from textproc.core.stops import StopChecker
from textproc.core.tokenizer import Tokenizer

__all__ = ["WEATHER_TOOL", "WORDS", "make_case", "expected", "collect", "chat_cases"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
WORDS = ["alpha", "beta", "gamma", "delta", "STOP", "omega", "你好", "世界", "天气", "😀", "👍🏽",
         "👨\u200d👩\u200d👧", "café", "naïve", "e\u0301", "\n", "  ", "END", "fox", "{x}"]


def make_case(i: int, rng: random.Random) -> dict[str, Any]:
    """Request i of the mix: stops, tools, reasoning, thinking prompts, long prompts, emoji, CJK."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 10))]
    text = " ".join(words)
    case: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "kwargs": {}}
    kind = i % 6
    if kind == 0:  # stop strings, sometimes kept
        visible = [w for w in words if w.strip()] or ["alpha"]
        case["stop"] = [rng.choice(visible), "never-there"]
        case["include_stop"] = bool(i % 12 == 0)
    elif kind == 1:  # the "model" calls a tool
        city = rng.choice(["Paris", "東京", "Zürich 😀"])
        args = json.dumps({"city": city}, ensure_ascii=False)
        case["messages"][0]["content"] = (f"{text} <tool_call>\n{{\"name\": \"get_weather\", "
                                          f"\"arguments\": {args}}}\n</tool_call>")
        case["tools"] = [WEATHER_TOOL]
    elif kind == 2:  # the "model" reasons, then answers
        case["messages"][0]["content"] = f"<think>{text}</think>{rng.choice(WORDS)} done"
    elif kind == 3:  # the prompt opens <think>: output is reasoning until </think>
        case["kwargs"] = {"enable_thinking": True}
        case["messages"][0]["content"] = f"{text}</think>answer {rng.choice(WORDS)}"
    elif kind == 4:  # a long prompt (long system message), short answer
        case["messages"].insert(0, {"role": "system", "content": " ".join(WORDS) * 40})
    else:  # emoji / CJK only, with a stop that may split a multi-byte character's tokens
        case["messages"][0]["content"] = "".join(rng.choice(WORDS[6:14]) for _ in range(8))
        case["stop"] = ["世界"]
    return case


def expected(tok: Tokenizer, case: dict[str, Any], rid: str) -> dict[str, Any]:
    tools = case.get("tools")
    prompt = render_chat(tok.chat_template, case["messages"], tools, add_generation_prompt=True,
                         **{**tok.special_tokens_map, **case["kwargs"]})
    prompt_ids = tok.encode(prompt)
    answer_ids = tok.encode(case["messages"][-1]["content"]) + [tok.eos_token_id]
    text = tok.decode(answer_ids, skip_special_tokens=True)
    checker = StopChecker(case.get("stop") or [], include_stop=case.get("include_stop", False))
    out = checker.feed(text)
    if not checker.is_finished:
        out += checker.finish()
    merged = parse_output(out, reasoning=True, tools=bool(tools),
                          starts_in_reasoning=prompt_starts_in_reasoning(prompt), request_id=rid)
    finish = "tool_calls" if merged["tool_calls"] else "stop"
    return {"merged": merged, "finish_reason": finish, "stop": checker.matched,
            "prompt_tokens": len(prompt_ids), "answer_tokens": len(answer_ids)}


async def collect(stream: Any) -> list[TextEvent]:
    return [event async for event in stream]


async def chat_cases(client: TextClient, cases: list[dict[str, Any]], prefix: str,
                      timeout_s: float) -> list[list[TextEvent]]:
    """Every case as one concurrent chat (request id ``{prefix}-{i}``); all events of each."""
    streams = [client.chat(c["messages"], tools=c.get("tools"), stop=c.get("stop"),
                           include_stop=c.get("include_stop", False),
                           chat_template_kwargs=c["kwargs"], request_id=f"{prefix}-{i}")
               for i, c in enumerate(cases)]
    return await asyncio.wait_for(asyncio.gather(*map(collect, streams)), timeout_s)
