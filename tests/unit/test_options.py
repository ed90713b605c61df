"""The request's option values (textproc.options): one definition carried whole through the
frames, keyword convenience sorted by field name, and one check per field whose message is the
same wherever the request enters (the HTTP body, the worker)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from textproc.errors import InvalidInput
from textproc.http.api_types import ApiError
from textproc.http.openai.bodies import parse_chat_request, parse_completion_request
from textproc.options import (
    BODY_OPTIONS,
    MAX_STOP_STRINGS,
    SAMPLING_PARAMS,
    BodyOption,
    OutputOptions,
    ParseOptions,
    SamplingOptions,
    check_output_options,
    check_sampling_options,
    check_tool_choice,
    split_options,
)
from textproc.protocol import ChatRequest, Submit, WorkerInFrame

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_keywords_are_sorted_into_the_three_values_by_field_name() -> None:
    sampling, output, parse = split_options({"max_tokens": 5, "params": {"seed": 1}, "stop": ["x"],
                                             "parallel_tool_calls": False, "tools": True})
    assert sampling == SamplingOptions(max_tokens=5, params={"seed": 1})
    assert output == OutputOptions(stop=["x"], parallel_tool_calls=False)
    assert parse == ParseOptions(tools=True)
    with pytest.raises(TypeError, match=r"unknown request options \['stops'\]"):
        split_options({"stops": ["x"]})


def test_the_values_travel_whole_through_the_frames() -> None:
    sampling = SamplingOptions(max_tokens=9, min_tokens=2, stop_token_ids=[7], n=3,
                               params={"temperature": 0.5}, logit_bias={12: -100.0})
    output = OutputOptions(stop=["END"], include_stop=True, stream_calls=False, logprobs=4)
    chat = ChatRequest("r", [{"role": "user", "content": "hi"}], sampling=sampling, output=output)
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(chat), type=WorkerInFrame)
    assert isinstance(back, ChatRequest) and back.sampling == sampling and back.output == output
    parse = ParseOptions(reasoning=True, tools=True, tool_format="mistral", tool_schemas=[TOOL])
    submit = Submit("r", b"c", 3, 9, b"", 2, output, parse)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(submit), type=Submit) == submit
    # the values are maps by field name: a field an older peer does not know is ignored, one a
    # newer peer added is its default when an older peer's frame lacks it
    newer = msgspec.msgpack.encode(["Submit", "r", b"c", 3, 9, b"", 0,
                                    {"stop": ["x"], "an_option_from_later": 1}])
    assert msgspec.msgpack.decode(newer, type=Submit).output == OutputOptions(stop=["x"])
    # a value of the wrong type is a malformed frame, not a request with a surprise inside
    bad = msgspec.msgpack.encode(["ChatRequest", "r", [], None, "auto", {}, True, False, None,
                                  None, {"max_tokens": "many"}])
    with pytest.raises(msgspec.ValidationError, match=r"max_tokens"):
        msgspec.msgpack.decode(bad, type=WorkerInFrame)


def _http_error(**fields: Any) -> ApiError:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(ApiError) as err:
        parse_chat_request(msgspec.json.encode(body), served_models=["m"])
    return err.value


@pytest.mark.parametrize("fields, check", [
    ({"stop": ["ok", ""]}, lambda: check_output_options(OutputOptions(stop=["ok", ""]))),
    ({"stop": ["s"] * (MAX_STOP_STRINGS + 1)},
     lambda: check_output_options(OutputOptions(stop=["s"] * (MAX_STOP_STRINGS + 1)))),
    ({"stop": ["x" * 2000]}, lambda: check_output_options(OutputOptions(stop=["x" * 2000]))),
    ({"n": 200}, lambda: check_sampling_options(SamplingOptions(n=200))),
    ({"tool_choice": "required"}, lambda: check_tool_choice("required", [])),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
     lambda: check_tool_choice({"type": "function", "function": {"name": "g"}}, [TOOL])),
    ({"tools": [TOOL], "tool_choice": "required", "guided_regex": "a"},
     lambda: check_tool_choice("required", [TOOL], {"regex": "a"})),
])
def test_the_http_layer_and_the_worker_give_one_message(fields: dict[str, Any], check: Any) -> None:
    """The worker runs the same checks on every frame (RequestBuilder._submit, .chat)."""
    with pytest.raises(InvalidInput) as worker:
        check()
    http = _http_error(**fields)
    assert (http.message, http.param) == (str(worker.value), worker.value.param)


def _sample(option: BodyOption) -> Any:
    """A value of ``option``'s type, in its range, that is not its default."""
    if option.kind is bool:
        return not option.default
    if option.kind is int:
        return max(int(option.ge if option.ge is not None else 0), 0) + 3
    low = option.ge if option.ge is not None else option.gt if option.gt is not None else 0.0
    return (low + (option.le if option.le is not None else low + 2.0)) / 2 + 0.125


def test_every_body_option_reaches_its_value_by_name_in_chat_and_completion_bodies() -> None:
    """A BodyOption is a field of both OpenAI bodies and lands where it says (nothing in
    textproc.http names it); an absent one keeps the value's default."""
    assert {o.name for o in SAMPLING_PARAMS} <= {o.name for o in BODY_OPTIONS}
    given = {o.name: _sample(o) for o in BODY_OPTIONS}
    chat = parse_chat_request(msgspec.json.encode(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **given}),
        served_models=["m"])
    completion = parse_completion_request(msgspec.json.encode(
        {"model": "m", "prompt": "hi", **given}), served_models=["m"])
    bare = parse_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
                              served_models=["m"])
    for params in (chat, completion):
        for option in BODY_OPTIONS:
            where = {"sampling": params.sampling, "output": params.output}.get(option.owner)
            got = (params.sampling.params[option.field] if where is None
                   else getattr(where, option.field))
            assert got == given[option.name], option
    for option in BODY_OPTIONS:
        if option.owner == "params":
            assert option.field not in bare.sampling.params, option
        else:
            value = bare.sampling if option.owner == "sampling" else bare.output
            assert getattr(value, option.field) == option.default, option
