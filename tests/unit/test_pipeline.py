"""OutputPipeline: any split of the ids gives the same result as feeding them all at once, and
that equals the one-shot reference parse_output(stop-truncate(decode(ids)))."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.stream_vocab import byte_level_hf, real_vocab, textproc_vocab
from tests.helpers.stop_reference import reference as stop_reference
from textproc.core.detokenizer import IncrementalDetokenizer
from textproc.errors import InvalidInput
from textproc.core.parsing import OutputParser, merge_deltas, parse_output
from textproc.core.pipeline import OutputPipeline

FRAGMENTS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", '{"name": "f", "arguments": {"x": 1}}',
    '{"name": "g", "arguments": {"s": "a</tool_call>b"}}', "hello", " world", "\n\n", "STOP",
    "é😀", "<", "/", "think", ">", " ", "你好", "{", "\"",
]
STOPS = ["STOP", "\n\n", "ld <", "😀", "</tool_call>", "o w"]


def _vocab(name: str) -> Any:
    if name == "toy":
        return textproc_vocab(byte_level_hf())
    return real_vocab(name)[0]


@st.composite
def cases(draw: st.DrawFn, tok: Any) -> dict[str, Any]:
    text = "".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=12)))
    ids = tok.encode(text)
    if draw(st.booleans()):  # raw ids too: lone bytes, specials, invalid UTF-8
        at = draw(st.integers(0, len(ids)))
        ids[at:at] = draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=4))
    cuts = sorted(draw(st.sets(st.integers(0, len(ids)), max_size=len(ids) + 1)))
    steps, last = [], 0
    for c in cuts + [len(ids)]:
        steps.append(ids[last:c])
        last = c
    reasoning = draw(st.booleans())
    return {
        "ids": ids,
        "steps": steps,
        "options": {
            "stop": draw(st.lists(st.sampled_from(STOPS), max_size=3, unique=True)),
            "include_stop": draw(st.booleans()),
            "min_tokens": draw(st.sampled_from([0, 0, 1, 3, 6])),
            "reasoning": reasoning,
            "tools": draw(st.booleans()),
            "starts_in_reasoning": reasoning and draw(st.booleans()),
            # streamed or held, a call goes out only once complete: the same answer
            "stream_calls": draw(st.booleans()),
        },
    }


def _run(tok: Any, steps: list[list[int]], options: dict[str, Any]) -> tuple[Any, ...]:
    p = OutputPipeline(tok, at_start=True, request_id="r", **options)
    deltas: list[dict[str, Any]] = []
    for step in steps:
        deltas += p.feed(step)
        assert all(deltas), "no empty deltas"
    deltas += p.finish("length")
    return merge_deltas(deltas), p.finish_reason, p.stop_reason


def _reference(tok: Any, ids: list[int], options: dict[str, Any]) -> tuple[Any, ...]:
    text = tok.decode(ids, skip_special_tokens=True)
    eligible_from = 0
    if options["min_tokens"]:
        d = IncrementalDetokenizer(tok, at_start=True)
        eligible_from = len(d.feed(ids[: options["min_tokens"]]))
    out, stop = stop_reference(
        text, options["stop"], include_stop=options["include_stop"], eligible_from=eligible_from
    )
    parser = OutputParser(
        reasoning=options["reasoning"],
        tools=options["tools"],
        starts_in_reasoning=options["starts_in_reasoning"],
        stream_calls=options["stream_calls"],
        request_id="r",
    )
    merged = merge_deltas(parser.feed(out) + parser.finish())
    assert merged == parse_output(out, reasoning=options["reasoning"], tools=options["tools"],
                                  starts_in_reasoning=options["starts_in_reasoning"],
                                  stream_calls=options["stream_calls"], request_id="r")
    # "tool_calls" only for a complete call: a streamed header whose call a stop string cut
    # (or that turned out malformed) ends with "stop"
    reason = "length" if stop is None else ("tool_calls" if parser.has_tool_calls else "stop")
    return merged, reason, stop


@pytest.mark.parametrize("name", ["toy", "qwen3"])
@given(data=st.data())
def test_any_split_equals_all_at_once_and_reference(name: str, data: st.DataObject) -> None:
    tok = _vocab(name)
    case = data.draw(cases(tok))
    streamed = _run(tok, case["steps"], case["options"])
    assert streamed == _run(tok, [case["ids"]], case["options"])
    assert streamed == _reference(tok, case["ids"], case["options"])


def test_stop_string_across_deltas_then_ignores_later_steps() -> None:
    tok = _vocab("toy")
    p = OutputPipeline(tok, stop=["STOP"], at_start=True)
    out = []
    for chunk in ["Hello ", "ST", "OP and more"]:
        out += p.feed(tok.encode(chunk))
    assert merge_deltas(out)["content"] == "Hello "
    assert (p.is_finished, p.finish_reason, p.matched_stop, p.stop_reason) == (True, "stop", "STOP", "STOP")
    n = p.n_tokens
    assert p.feed(tok.encode("x")) == [] and p.finish("length") == [] and p.n_tokens == n


def test_stop_token_and_tool_calls_finish_reasons() -> None:
    tok = _vocab("toy")
    p = OutputPipeline(tok, stop=["END"], at_start=True)
    assert merge_deltas(p.feed(tok.encode("text EN")))["content"] == "text "
    assert merge_deltas(p.finish("stop", stop_token_id=0))["content"] == "EN"
    assert (p.finish_reason, p.stop_reason, p.matched_stop) == ("stop", 0, None)

    p = OutputPipeline(tok, tools=True, at_start=True, request_id="r")
    ids = tok.encode('ok<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    merged = merge_deltas(p.feed(ids) + p.finish("stop"))
    assert merged["content"] == "ok" and merged["tool_calls"][0]["function"]["name"] == "f"
    assert p.finish_reason == "tool_calls" and p.n_tokens == len(ids)

    p = OutputPipeline(tok, at_start=True)
    p.feed(tok.encode("abc"))
    assert p.finish("abort") == [] and p.finish_reason == "abort"
    with pytest.raises(InvalidInput, match=r"finish_reason 'done' is not one of \['abort', 'length', 'stop'\]"):
        OutputPipeline(tok).finish("done")


def test_holdback_is_released_as_soon_as_disproved() -> None:
    tok = _vocab("toy")
    p = OutputPipeline(tok, stop=["</s>"], reasoning=True, at_start=True)
    assert p.feed(tok.encode("a <")) == [{"content": "a "}]  # "<" may start "</s>" or "<think>"
    assert p.feed(tok.encode("b")) == [{"content": "<b"}]
    emoji = tok.encode("😀")
    assert len(emoji) > 1
    assert p.feed(emoji[:1]) == []  # an incomplete character
    assert p.feed(emoji[1:]) == [{"content": "😀"}]


def test_construction_is_cheap() -> None:
    tok = _vocab("toy")
    OutputPipeline(tok, stop=["\n\n"], reasoning=True, tools=True)
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        OutputPipeline(tok, stop=["\n\n"], reasoning=True, tools=True)
    per = (time.perf_counter() - t0) / n
    assert per < 300e-6, f"{per * 1e6:.0f} us per pipeline"


def test_malformed_or_cut_off_calls_are_content_with_a_non_tool_calls_finish() -> None:
    """A non-streamed answer (stream_calls=False): a call cut off by max_tokens or a stop
    string, or one with bad JSON, is content and the finish reason is not "tool_calls"."""
    tok = _vocab("toy")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    cut = 'ok<tool_call>{"name": "f", "arguments": {"x": 1'
    for stops, text, engine_reason, want in (
        ([], cut, "length", "length"),
        (["STOP"], cut + "STOP", "stop", "stop"),
        ([], 'ok<tool_call>{"name": "f", "arguments": {"x": tru}}</tool_call>', "stop", "stop"),
        ([], 'ok<tool_call>{"name": "g", "arguments": {}}</tool_call>', "stop", "stop"),  # undeclared
    ):
        p = OutputPipeline(tok, tools=True, at_start=True, stop=stops, tool_schemas=tools,
                           stream_calls=False)
        merged = merge_deltas(p.feed(tok.encode(text)) + p.finish(engine_reason))
        assert merged["tool_calls"] == [] and merged["content"] == text.replace("STOP", ""), text
        assert p.finish_reason == want
    # streamed: no part of the call went out either (a client cannot take back a call it
    # acted on); its text is content and the finish reason says no call completed
    p = OutputPipeline(tok, tools=True, at_start=True, stop=["STOP"], tool_schemas=tools)
    deltas = [d for i in tok.encode(cut + "STOP") for d in p.feed([i])] + p.finish("stop")
    assert not any("tool_calls" in d for d in deltas)
    assert merge_deltas(deltas) == {"reasoning_content": "", "content": cut, "tool_calls": []}
    assert p.finish_reason == "stop"
    # parallel_tool_calls false: one call, the second is content
    two = '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    p = OutputPipeline(tok, tools=True, at_start=True, tool_schemas=tools, parallel_tool_calls=False)
    merged = merge_deltas(p.feed(tok.encode(two)) + p.finish("stop"))
    assert len(merged["tool_calls"]) == 1 and merged["content"] == two[len(two) // 2:]
    assert p.finish_reason == "tool_calls"


class _SpecialVocab:
    """A tiny vocabulary whose tool-call markers are special tokens (as in Mistral / Kimi)."""

    TOKENS = ["[TOOL_CALLS]", "[ARGS]", "<|im_end|>", "f", '{"a": 1}', "hi "]
    vocab_size = len(TOKENS)
    special_ids = frozenset({0, 1, 2})
    decode_strip_leading = 0
    byte_fallback_ids: frozenset[int] = frozenset()

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes:
        if skip_special_tokens and token_id in self.special_ids:
            return b""
        return self.TOKENS[token_id].encode()


def test_specials_a_format_needs_reach_the_parser_with_skip_special_tokens() -> None:
    tok = _SpecialVocab()
    ids = [5, 0, 3, 1, 4, 2]  # hi [TOOL_CALLS]f[ARGS]{"a": 1}<|im_end|>
    p = OutputPipeline(tok, tools=True, tool_format="mistral", at_start=True)
    merged = merge_deltas(sum((p.feed([i]) for i in ids), []) + p.finish("stop"))
    assert merged["content"] == "hi " and p.finish_reason == "tool_calls"
    assert merged["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    # without tool parsing the client asked to skip specials: none is seen
    p = OutputPipeline(tok, at_start=True)
    assert merge_deltas(p.feed(ids) + p.finish("stop"))["content"] == 'hi f{"a": 1}'


@pytest.mark.parametrize("stream_calls", [True, False])
def test_a_call_malformed_after_its_name_matches_the_reference(stream_calls: bool) -> None:
    """Found by the property test above: `{"name": "f"",` cut by length. Streamed or held, the
    whole call is content."""
    tok = _vocab("toy")
    ids = tok.encode('<tool_call>{"name": "f"", "arguments": {"x": 1}}')
    options = {"stop": [], "include_stop": False, "min_tokens": 0, "reasoning": False,
               "tools": True, "starts_in_reasoning": False, "stream_calls": stream_calls}
    got = _run(tok, [ids], options)
    assert got == _reference(tok, ids, options)
    assert got[0]["tool_calls"] == [] and got[0]["content"] == tok.decode(ids)


def test_reasoning_newlines_a_stop_string_may_start_go_out_as_all_at_once() -> None:
    """Inside reasoning, a newline the stop checker holds (a stop starts with it) and the
    newlines the parser holds (trailing reasoning newlines are dropped before the close tag):
    fed one character at a time, the deltas add up to the one-shot result."""
    tok = _vocab("toy")
    text = "<think>\nstep one.\nstep two\n\nstep three\n</think>\n\nThe answer.\n\nDone"
    options: dict[str, Any] = {"stop": ["\n@@@@\n"], "reasoning": True, "tools": True}
    whole = _run(tok, [tok.encode(text)], options)
    assert whole[0]["reasoning_content"] == "step one.\nstep two\n\nstep three"
    assert whole[0]["content"] == "The answer.\n\nDone"
    steps = [tok.encode(c) for c in text]
    assert _run(tok, steps, options) == whole
