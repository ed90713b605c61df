"""What Codex CLI sends ``POST /v1/responses``, end to end: first through the official ``openai``
client (a namespace tool call out and its output back in, sealed reasoning handed back, a hosted
tool named rather than refused), then the real ``codex exec`` (npm ``@openai/codex``, installed
by ``bash scripts/fetch_agents.sh``) against the same stub service.

The stub engine echoes the last user turn of the prompt, so the input scripts the model:
``<think>..</think>`` makes it reason and ``<tool_call>{...}</tool_call>`` makes it call a tool;
a tool's output comes back as the answer (the ChatML template renders it as a user
``<tool_response>`` turn), proof that it reached the prompt.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import openai
import pytest

from tests.helpers.codex import run_codex
from tests.helpers.service import Service, build_toy_model, wait_http

pytestmark = pytest.mark.timeout(120)

MODEL = "toy"
OBJECT = {"type": "object", "properties": {"target": {"type": "string"}},
          "required": ["target"], "additionalProperties": False}
EXEC = {"type": "function", "name": "exec_command", "description": "Runs a command.",
        "strict": False, "parameters": {"type": "object", "properties": {
            "cmd": {"type": "string"}}, "required": ["cmd"]}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1",
          "description": "Tools for spawning and managing sub-agents.", "tools": [
              {"type": "function", "name": "close_agent", "description": "Close an agent.",
               "strict": False, "parameters": OBJECT},
              {"type": "function", "name": "wait_agent", "description": "Wait for agents.",
               "strict": False, "parameters": OBJECT}]}
TOOLS = [EXEC, AGENTS, {"type": "web_search", "external_web_access": False}]
CALL = {"name": "multi_agent_v1__close_agent", "arguments": {"target": "agent-7"}}
TURN = f"<think>Close it.</think><tool_call>\n{json.dumps(CALL)}\n</tool_call>"
CODEX_ARGS: dict[str, Any] = {  # what Codex CLI adds to every turn
    "tool_choice": "auto", "parallel_tool_calls": True, "reasoning": {"summary": "auto"},
    "store": False, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "01a2-thread", "extra_body": {"client_metadata": {
        "session_id": "01a2-thread", "x-codex-turn-metadata": '{"turn_id": "t1"}'}},
}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("codex")
    model = build_toy_model(root / MODEL)
    # Codex's prompt (instructions, 9 tools) is ~31k tokens in the toy's 600-token vocabulary
    service = Service(root, model, workers=1, args=[
        "--stub-arg=--step-ms=1", "--max-model-len=200000", "--http", "127.0.0.1:0"]).start()
    try:
        yield wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_namespace_call_round_trip(client: openai.OpenAI) -> None:
    developer = {"type": "message", "role": "developer",
                 "content": [{"type": "input_text", "text": "You are a coding agent."}]}
    resp = client.responses.create(model=MODEL, input=[developer, _user(TURN)],  # type: ignore[list-item]
                                   tools=TOOLS, **CODEX_ARGS)  # type: ignore[arg-type]
    assert resp.status == "completed" and resp.store is False
    assert [item.type for item in resp.output] == ["reasoning", "function_call"]
    reasoning, call = resp.output
    assert call.type == "function_call" and reasoning.type == "reasoning"
    assert (call.namespace, call.name) == ("multi_agent_v1", "close_agent")
    assert json.loads(call.arguments) == CALL["arguments"]
    sealed = reasoning.encrypted_content
    assert sealed and "Close it" not in sealed
    # the hosted tool was not offered, and the response says so
    warnings = (resp.model_extra or {})["warnings"]
    assert [(w["code"], w["param"]) for w in warnings] == [("tool_not_offered", "tools[2]")]
    assert [t.type for t in resp.tools] == ["function", "namespace"]

    # Codex hands every item back (store=false): the call with its namespace, the sealed
    # reasoning without its text, then the tool's output
    back = [developer, _user(TURN),
            {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": sealed},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id,
             "output": "agent-7 closed"}]
    follow = client.responses.create(model=MODEL, input=back, tools=TOOLS,  # type: ignore[arg-type]
                                     **CODEX_ARGS)
    assert follow.output_text.strip() == "<tool_response>\nagent-7 closed\n</tool_response>"
    assert "warnings" in (follow.model_extra or {})  # web_search again; nothing else
    assert len((follow.model_extra or {})["warnings"]) == 1
    # the prompt held the reasoning again: an item this service cannot open leaves it out
    foreign = [*back[:2], {"type": "reasoning", "id": "rs_x", "summary": [],
                           "encrypted_content": "tp1.bm90IG91cnM"}, *back[3:]]
    other = client.responses.create(model=MODEL, input=foreign, tools=TOOLS,  # type: ignore[arg-type]
                                    **CODEX_ARGS)
    assert follow.usage is not None and other.usage is not None
    assert follow.usage.input_tokens > other.usage.input_tokens
    codes = [w["code"] for w in (other.model_extra or {})["warnings"]]
    assert codes == ["tool_not_offered", "reasoning_not_restored"]


def test_namespace_call_streamed(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input=[_user(TURN)], tools=TOOLS,  # type: ignore[list-item]
                                          stream=True, **CODEX_ARGS))  # type: ignore[arg-type]
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in added] == [i.type for i in done] == ["reasoning", "function_call"]
    assert (added[1].namespace, added[1].name) == ("multi_agent_v1", "close_agent")
    assert added[0].encrypted_content is None and done[0].encrypted_content
    assert (done[1].namespace, done[1].name) == ("multi_agent_v1", "close_agent")
    arguments = "".join(e.delta for e in events
                        if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == CALL["arguments"]
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert final.output[1].namespace == "multi_agent_v1"
    assert final.output[0].encrypted_content == done[0].encrypted_content


def test_parallel_tool_calls_false_keeps_one_call(client: openai.OpenAI) -> None:
    second = {"name": "exec_command", "arguments": {"cmd": "ls"}}
    two = f"{TURN}<tool_call>\n{json.dumps(second)}\n</tool_call>"
    both = client.responses.create(model=MODEL, input=two, tools=TOOLS,  # type: ignore[arg-type]
                                   **CODEX_ARGS)
    assert [i.type for i in both.output] == ["reasoning", "function_call", "function_call"]
    one = client.responses.create(model=MODEL, input=two, tools=TOOLS,  # type: ignore[arg-type]
                                  **{**CODEX_ARGS, "parallel_tool_calls": False})
    # one call, as chat completions gives (the echo engine still says the rest: it is content)
    assert [i.type for i in one.output if i.type == "function_call"] == ["function_call"]
    assert one.output[1].type == "function_call" and one.output[1].name == "close_agent"
    assert one.parallel_tool_calls is False


def test_store_false_continues_a_stored_response_and_keeps_nothing(
        client: openai.OpenAI) -> None:
    stored = client.responses.create(model=MODEL, input=TURN, tools=TOOLS,  # type: ignore[arg-type]
                                     include=["reasoning.encrypted_content"])
    call = stored.output[1]
    assert call.type == "function_call" and stored.store is True
    unstored = client.responses.create(  # type: ignore[call-overload]
        model=MODEL, tools=TOOLS, previous_response_id=stored.id, store=False,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "done"}])
    assert unstored.output_text.strip() == "<tool_response>\ndone\n</tool_response>"
    assert unstored.previous_response_id == stored.id and unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="more", previous_response_id=unstored.id)


# ---------------------------------------------------------------- the real Codex CLI

def _codex(url: str, tmp_path: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    return run_codex(url, MODEL, tmp_path, prompt)


def test_codex_exec_answers(url: str, tmp_path: Path) -> None:
    done = _codex(url, tmp_path, "Say hello in three words.")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Say hello in three words."


def test_codex_exec_calls_a_namespaced_tool(url: str, tmp_path: Path) -> None:
    """The model calls ``multi_agent_v1__close_agent``: Codex gets it as ``close_agent`` in
    namespace ``multi_agent_v1``, runs its own handler (which refuses the made-up agent id) and
    sends the output back; the echo of that output is the turn's answer."""
    call = {"name": "multi_agent_v1__close_agent", "arguments": {"target": "nobody"}}
    done = _codex(url, tmp_path, f"<think>Close it.</think><tool_call>{json.dumps(call)}"
                                 "</tool_call>")
    assert done.returncode == 0, done.stderr[-3000:]
    answer = done.stdout.strip()
    assert answer.startswith("<tool_response>") and answer.endswith("</tool_response>")
    assert "invalid agent id nobody" in answer  # close_agent's own error, not "unsupported"
