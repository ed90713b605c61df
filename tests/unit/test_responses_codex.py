"""What Codex CLI sends the Responses API, parsed without a server: namespace tools and their
calls (textproc.http.responses.tools), hosted tools not offered, sealed reasoning items
(textproc.http.responses.reasoning) handed back, and the fields it adds on every turn."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from textproc.http.api_types import ApiError
from textproc.http.responses.bodies import ResponseStore, parse_responses_request
from textproc.http.responses.answers import ResponseBuilder
from textproc.http.responses.reasoning import KEY_FILE, ReasoningSeal

MODELS = ["m"]
OBJECT = {"type": "object", "properties": {"id": {"type": "string"}}}
EXEC = {"type": "function", "name": "exec_command", "description": "Run a command.",
        "strict": False, "parameters": {"type": "object", "properties": {
            "cmd": {"type": "string"}}}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1",
          "description": "Tools for sub-agents.", "tools": [
              {"type": "function", "name": "spawn_agent", "description": "Spawn one.",
               "strict": False, "parameters": OBJECT},
              {"type": "function", "name": "close_agent", "parameters": OBJECT}]}
WEB = {"type": "web_search", "external_web_access": False}
CODEX_FIELDS: dict[str, Any] = {
    "stream": True, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"}, "store": False,
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "thread-1",
    "client_metadata": {"session_id": "s-1", "x-codex-turn-metadata": '{"turn_id": "t"}'},
}


def _parse(kept: ResponseStore | None = None, **body: Any) -> Any:
    return parse_responses_request(json.dumps({"model": "m", **body}).encode(),
                                   served_models=MODELS, store=kept)


def test_codex_turn_offers_functions_and_namespace_members_not_hosted_tools() -> None:
    req = _parse(input=[{"type": "message", "role": "developer",
                         "content": [{"type": "input_text", "text": "be careful"}]},
                        {"type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": "hi"}]}],
                 tools=[EXEC, AGENTS, WEB], **CODEX_FIELDS)
    offered = [t["function"]["name"] for t in req.chat.tools]
    assert offered == ["exec_command", "multi_agent_v1__spawn_agent",
                       "multi_agent_v1__close_agent"]
    spawn = req.chat.tools[1]["function"]
    assert spawn["description"] == "(multi_agent_v1) Tools for sub-agents.\n\nSpawn one."
    assert spawn["parameters"] == OBJECT
    assert req.tools.call_name("multi_agent_v1__spawn_agent") == ("multi_agent_v1",
                                                                  "spawn_agent")
    assert req.tools.call_name("exec_command") == (None, "exec_command")
    # the hosted tool is named, not refused
    assert [(w["code"], w["param"]) for w in req.warnings] == [("tool_not_offered", "tools[2]")]
    assert "'web_search'" in req.warnings[0]["message"]
    # the echo repeats what was offered, in the Responses shape
    assert [t["type"] for t in req.echo["tools"]] == ["function", "namespace"]
    assert [t["name"] for t in req.echo["tools"][1]["tools"]] == ["spawn_agent", "close_agent"]
    assert req.echo["prompt_cache_key"] == "thread-1" and req.echo["store"] is False
    assert req.echo["reasoning"] == {"effort": None, "summary": "auto"}
    assert req.chat.output.parallel_tool_calls is True
    assert req.seal is None  # no store given: nothing to seal with


def test_namespaced_call_comes_back_with_its_namespace() -> None:
    req = _parse(input="x", tools=[EXEC, AGENTS])
    builder = ResponseBuilder("resp-1", req, created_at=0)
    events = builder.start()
    events += builder.feed([{"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                             "function": {"name": "multi_agent_v1__spawn_agent",
                                                          "arguments": '{"id": "a"}'}}]},
                            {"tool_calls": [{"index": 1, "id": "c1", "type": "function",
                                             "function": {"name": "exec_command",
                                                          "arguments": "{}"}}]}])
    events += builder.finish("tool_calls", prompt_tokens=1, completion_tokens=2)
    first, second = builder.response()["output"]
    assert (first["namespace"], first["name"], first["call_id"]) == ("multi_agent_v1",
                                                                      "spawn_agent", "c0")
    assert "namespace" not in second and second["name"] == "exec_command"
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert (added[0]["namespace"], added[0]["name"]) == ("multi_agent_v1", "spawn_agent")
    # the store keeps the flat name, as the model was offered it
    assert builder.assistant_message()["tool_calls"][0]["function"]["name"] == \
        "multi_agent_v1__spawn_agent"

    # handed back: the namespaced call is flattened into the prompt again
    back = _parse(tools=[AGENTS], input=[
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c0", "name": "spawn_agent",
         "namespace": "multi_agent_v1", "arguments": '{"id": "a"}'},
        {"type": "function_call_output", "call_id": "c0", "output": "spawned",
         "namespace": "multi_agent_v1", "name": "spawn_agent"}])
    assert back.chat.messages[1]["tool_calls"][0]["function"]["name"] == \
        "multi_agent_v1__spawn_agent"
    assert back.chat.messages[2] == {"role": "tool", "content": "spawned", "tool_call_id": "c0"}


def test_forced_namespaced_function() -> None:
    req = _parse(input="x", tools=[AGENTS], tool_choice={
        "type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"})
    assert req.chat.tool_choice == {"type": "function",
                                    "function": {"name": "multi_agent_v1__spawn_agent"}}
    assert req.echo["tool_choice"] == {"type": "function", "name": "spawn_agent",
                                       "namespace": "multi_agent_v1"}


def test_only_hosted_tools_leave_no_tools() -> None:
    req = _parse(input="x", tools=[WEB, {"type": "file_search", "vector_store_ids": ["v"]},
                                   {"type": "namespace", "name": "n", "tools": [
                                       {"type": "custom", "name": "patch"}]}])
    assert req.chat.tools is None and req.chat.tool_choice == "none"
    assert [w["param"] for w in req.warnings] == ["tools[0]", "tools[1]", "tools[2].tools[0]"]


@pytest.mark.parametrize("body, param, match", [
    ({"tools": [{"type": "websearch"}]}, "tools[0].type", "not a Responses API tool type"),
    ({"tools": [{"type": "namespace", "name": "n", "tools": "f"}]}, "tools[0].tools",
     "must be a list"),
    ({"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]},
     "tools[0].tools[0].type", "not allowed in a namespace"),
    ({"tools": [{"type": "namespace", "tools": []}]}, "tools[0].name", "non-empty string"),
    ({"tools": [{"type": "function", "name": "a__b"},
                {"type": "namespace", "name": "a", "tools": [{"type": "function",
                                                               "name": "b"}]}]},
     "tools[1].tools[0]", "declared twice"),
    ({"tools": [WEB], "tool_choice": {"type": "web_search"}}, "tool_choice.type",
     "does not run"),
    ({"reasoning": {"summary": "brief"}}, "reasoning.summary", "not one of"),
])
def test_tool_errors_name_the_field(body: dict[str, Any], param: str, match: str) -> None:
    with pytest.raises(ApiError, match=match) as err:
        _parse(input="x", **body)
    assert err.value.param == param and err.value.status == 400


def _reasoning_turn(req: Any) -> dict[str, Any]:
    builder = ResponseBuilder("resp-1", req, created_at=0)
    builder.start()
    events = builder.feed([{"reasoning_content": "2+2 "}, {"reasoning_content": "is 4"},
                           {"content": "4"}])
    events += builder.finish("stop", prompt_tokens=1, completion_tokens=3)
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    assert added["type"] == "reasoning" and added["encrypted_content"] is None
    item: dict[str, Any] = builder.response()["output"][0]
    return item


def test_sealed_reasoning_round_trip() -> None:
    store = ResponseStore()
    req = _parse(store, input="what is 2+2", **{**CODEX_FIELDS, "stream": False})
    assert req.seal is store.seal
    item = _reasoning_turn(req)
    sealed = item["encrypted_content"]
    assert isinstance(sealed, str) and sealed.startswith("tp1.") and "2+2" not in sealed
    assert store.seal.open(sealed) == "2+2 is 4"
    # handed back with no visible text (as Codex keeps it): the reasoning is in the prompt again
    back = {"type": "reasoning", "id": item["id"], "summary": [], "encrypted_content": sealed}
    follow = _parse(store, input=[{"role": "user", "content": "what is 2+2"}, back,
                                  {"role": "assistant", "content": "4"},
                                  {"role": "user", "content": "and 3+3?"}])
    assert follow.chat.messages[1] == {"role": "assistant", "content": "4",
                                       "reasoning_content": "2+2 is 4"}
    assert follow.warnings == ()
    # without the include the item carries no encrypted_content
    plain = _reasoning_turn(_parse(store, input="x"))
    assert plain["encrypted_content"] is None and plain["content"][0]["text"] == "2+2 is 4"


def test_reasoning_sealed_elsewhere_is_named_not_refused() -> None:
    store = ResponseStore()
    foreign = ReasoningSeal.random().seal("secret thoughts")
    forged = store.seal.seal("mine")[:-4] + "AAAA"
    for token, visible, text in ((foreign, [], ""), (forged, [{"type": "summary_text",
                                                                "text": "shown"}], "shown")):
        req = _parse(store, input=[{"role": "user", "content": "q"},
                                   {"type": "reasoning", "id": "rs", "summary": visible,
                                    "encrypted_content": token},
                                   {"role": "assistant", "content": "a"},
                                   {"role": "user", "content": "q2"}])
        assistant = req.chat.messages[1]
        assert assistant.get("reasoning_content", "") == text
        assert [(w["code"], w["param"]) for w in req.warnings] == [
            ("reasoning_not_restored", "input[1].encrypted_content")]


def test_seal_key_is_shared_through_the_runtime_dir(tmp_path: Path) -> None:
    first = ReasoningSeal.for_service(tmp_path)
    second = ReasoningSeal.for_service(tmp_path)  # another frontend of the same service
    assert second.open(first.seal("shared")) == "shared"
    assert os.stat(tmp_path / KEY_FILE).st_mode & 0o777 == 0o600
    assert list(tmp_path.iterdir()) == [tmp_path / KEY_FILE]  # no temporary file left
    (tmp_path / "other").mkdir()
    other = ReasoningSeal.for_service(tmp_path / "other")  # another service
    assert other.open(first.seal("shared")) is None
    (tmp_path / KEY_FILE).write_bytes(b"short")
    with pytest.raises(OSError, match="not a 32-byte key"):
        ReasoningSeal.for_service(tmp_path)
