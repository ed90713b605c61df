"""The scale-out bodies without a server: vLLM's ``sampling_params`` to the request's options
and back (a rendered body generates with the values it was rendered with), and any
``sampling_params`` either parses or is a 400 naming a field under it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from textproc.http.api_types import ApiError
from textproc.http.scale_out.bodies import (
    options_from_sampling_params,
    parse_generate_request,
    sampling_params_body,
)

_VALUE = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-3, 3) | st.text(max_size=4) \
    | st.lists(st.integers(-2, 9), max_size=3)
_KEYS = st.sampled_from(["temperature", "top_p", "top_k", "min_p", "seed", "n", "max_tokens",
                         "min_tokens", "stop", "stop_token_ids", "ignore_eos", "logit_bias",
                         "skip_special_tokens", "include_stop_str_in_output", "bad_words",
                         "structured_outputs", "output_kind", "presence_penalty", "unknown"])


@settings(max_examples=300, deadline=None)
@given(sp=st.dictionaries(_KEYS, _VALUE, max_size=5))
def test_any_sampling_params_parse_or_name_the_field(sp: dict[str, Any]) -> None:
    body = json.dumps({"token_ids": [1, 2], "sampling_params": sp}).encode()
    try:
        parse_generate_request(body, served_models=["m"])
    except ApiError as exc:
        assert exc.status == 400 and exc.param and exc.param.startswith("sampling_params"), exc


@pytest.mark.parametrize("sp", [
    {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "seed": 11,
     "max_tokens": 30, "min_tokens": 2, "stop": ["x", "yz"], "stop_token_ids": [7],
     "ignore_eos": True, "include_stop_str_in_output": True, "skip_special_tokens": False,
     "logit_bias": {"5": -3.0}, "presence_penalty": 0.5, "frequency_penalty": 0.25,
     "repetition_penalty": 1.1, "n": 2},
    {"temperature": 0.0, "max_tokens": 4, "structured_outputs": {"regex": "[ab]+"}},
    {"structured_outputs": {"json_object": True}},
])
def test_sampling_params_round_trip(sp: dict[str, Any]) -> None:
    sampling, output, structured = options_from_sampling_params(sp)
    body = sampling_params_body(sampling, output, structured, stream=False,
                                max_tokens=sampling.max_tokens)
    assert options_from_sampling_params(body) == (sampling, output, structured)
    for key, value in sp.items():
        if key != "structured_outputs":
            assert body[key] == value, key


def test_a_missing_value_is_vllms_default_not_the_models() -> None:
    sampling, _, _ = options_from_sampling_params({})
    assert sampling.params["temperature"] == 1.0 and sampling.params["top_k"] == 0
    assert sampling.max_tokens is None  # the room the context leaves, as vLLM's generate
    greedy, _, _ = options_from_sampling_params({"temperature": 0, "top_k": 5})
    assert greedy.params["top_k"] == 0  # greedy: vLLM turns the filters off
