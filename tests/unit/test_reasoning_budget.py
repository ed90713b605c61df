"""Reasoning budgets and fast-forward in the Guide: a random walk (uniform among the allowed ids,
as engine_stub's random mode) never spends more reasoning tokens than the budget (plus the
close tag and at most the bytes of one character), and what it writes after the forced close
is still valid for the constraint (the JSON validates); ``forced_ids`` are exactly the ids
that are the only choice."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.schemas import SCHEMAS
from textproc.core.constraints import Guide, TokenVocabulary, compile_constraint
from textproc.core.constraints.plans.reasoning_budget import reasoning_states
from textproc.core.constraints.plans.strict_calls import free_reasoning_pattern, strict_calls_pattern
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, parse_output

THINK = REASONING_FORMATS["think"]
PIECES = [b"</think>", b"<think>", b"<tool_call>", b"</tool_call>", b"\n\n", b"\"name\"", b"</", b"think",
          b"\xc3\xa9", b"\xc3", b"\xa9", b"true", b"null", b"{\"", b"\"}", b"\": "]
SCHEMA_NAMES = sorted(n for n in SCHEMAS if n not in ("tree",))


def _vocab() -> TokenVocabulary:
    data = [bytes([b]) for b in range(1, 128)] + PIECES + [b""]
    return TokenVocabulary(data, end_ids=[len(data) - 1])


VOCAB = _vocab()
CLOSE_IDS = [127 + PIECES.index(b"</think>"), 127 + PIECES.index(b"\n\n")]


def _walk(guide: Guide, rng: random.Random, steps: int) -> bytes:
    out = b""
    for _ in range(steps):
        if guide.is_finished:
            break
        if guide.is_accepting and rng.random() < 0.3:
            guide.advance(guide.index.end_ids[0])
            break
        allowed = guide.allowed_ids()
        token_id = rng.choice(allowed) if rng.random() < 0.9 else guide.completion_token()
        if token_id < 0:
            break
        guide.advance(token_id)
        out += VOCAB.token_bytes(token_id)
    return out


@settings(max_examples=30)
@given(name=st.sampled_from(SCHEMA_NAMES), budget=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_budget_holds_under_random_schemas(name: str, budget: int, seed: int) -> None:
    schema = SCHEMAS[name]
    regex = free_reasoning_pattern(THINK, starts_inside=True, close_text="</think>\n\n") + \
        f"(?:{json_schema_to_regex(schema)})"
    index = compile_constraint(VOCAB, regex=regex)
    states = reasoning_states(index, VOCAB.token_bytes, close="</think>", starts_inside=True)
    assert index.initial_state in states
    guide = Guide(index)
    guide.limit_reasoning(budget, states=states, close_ids=CLOSE_IDS)
    text = _walk(guide, random.Random(seed), budget + 400)
    assert guide.reasoning_tokens <= budget + 1 + 3, (guide.reasoning_tokens, text)
    if guide.ended:
        reasoning, _, answer = text.partition(b"</think>\n\n")
        assert b"</think>" not in reasoning
        jsonschema.validate(json.loads(answer), schema)


@settings(max_examples=20)
@given(budget=st.integers(0, 30), seed=st.integers(0, 2**16))
def test_budget_in_strict_auto_with_an_opened_block(budget: int, seed: int) -> None:
    tools = {"add": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    regex = strict_calls_pattern(TOOL_FORMATS["hermes"], tools, parallel=True, to_regex=json_schema_to_regex,
                                 reasoning=THINK)
    index = compile_constraint(VOCAB, regex=regex)
    states = reasoning_states(index, VOCAB.token_bytes, close="</think>", starts_inside=False,
                              open_tags=THINK.open_tags)
    guide = Guide(index)
    guide.limit_reasoning(budget, states=states, close_ids=CLOSE_IDS)
    rng = random.Random(seed)
    guide.advance(127 + PIECES.index(b"<think>"))  # the model opens the block
    assert guide.state in states
    text = b"<think>" + _walk(guide, rng, budget + 300)
    assert guide.reasoning_tokens <= budget + 1 + 1 + 3
    got = parse_output(text.decode(), tools=True, reasoning=True, tool_schemas=[
        {"type": "function", "function": {"name": "add", "parameters": tools["add"]}}])
    for call in got["tool_calls"]:
        jsonschema.validate(json.loads(call["function"]["arguments"]), tools["add"])


def test_forced_ids_are_the_only_choices() -> None:
    vocab = TokenVocabulary([b"{", b"\"k\"", b": ", b"1", b"2", b"}", b""], end_ids=[6])
    index = compile_constraint(vocab, regex='\\{"k": [12]\\}')
    guide = Guide(index)
    assert guide.forced_ids() == [0, 1, 2]  # up to the value, where two ids are allowed
    for token_id in guide.forced_ids():
        guide.advance(token_id)
    assert guide.forced_ids() == []
    guide.advance(3)
    assert guide.forced_ids() == [5]  # the close; the end id is left to the engine


def test_budget_forces_the_close_through_the_mask() -> None:
    index = compile_constraint(VOCAB, regex=free_reasoning_pattern(THINK, starts_inside=True,
                                                                    close_text="</think>\n\n") + "ok")
    states = reasoning_states(index, VOCAB.token_bytes, close="</think>", starts_inside=True)
    guide = Guide(index)
    guide.limit_reasoning(2, states=states, close_ids=CLOSE_IDS)
    guide.advance(ord("a") - 1)
    guide.advance(ord("b") - 1)
    assert guide.allowed_ids() == [CLOSE_IDS[0]]
    mask = int.from_bytes(guide.allowed_mask(), "little")
    assert mask == 1 << CLOSE_IDS[0]
    # the close tag is forced; the newlines after it are content (two ways to write them)
    assert guide.forced_ids() == CLOSE_IDS[:1]
    for token_id in guide.forced_ids():
        guide.advance(token_id)
    assert guide.reasoning_tokens == 3 and guide.state not in states
    guide.reset()  # an engine's rollback: the budget is whole again
    assert guide.state == index.initial_state and guide.reasoning_left == 2 and guide.reasoning_tokens == 0


@pytest.mark.parametrize("starts_inside", [True, False])
def test_reasoning_states_stop_at_the_close(starts_inside: bool) -> None:
    regex = free_reasoning_pattern(THINK, starts_inside=starts_inside) + "x"
    index = compile_constraint(VOCAB, regex=regex)
    states = reasoning_states(index, VOCAB.token_bytes, close="</think>", starts_inside=starts_inside,
                              open_tags=THINK.open_tags)
    guide = Guide(index)
    if not starts_inside:
        assert guide.state not in states
        guide.advance(127 + PIECES.index(b"<think>"))
    assert guide.state in states
    for token_id in [ord("h") - 1, 127 + PIECES.index(b"</"), 127 + PIECES.index(b"think")]:
        guide.advance(token_id)
        assert guide.state in states  # "h</think" is still reasoning
    guide.advance(ord(">") - 1)
    assert guide.state not in states


def test_checkpoint_restores_the_walk_and_its_budget() -> None:
    """A rollback by checkpoint (an engine walking draft tokens and back) leaves the guide as
    the replay from the start does: the same state, budget, close position and forced run."""
    index = compile_constraint(VOCAB, regex=free_reasoning_pattern(THINK, starts_inside=True,
                                                                    close_text="</think>\n\n") + "ok")
    states = reasoning_states(index, VOCAB.token_bytes, close="</think>", starts_inside=True)
    ids = [ord("a") - 1, ord("b") - 1, CLOSE_IDS[0]]
    for keep in range(len(ids)):
        guide = Guide(index)
        guide.limit_reasoning(2, states=states, close_ids=CLOSE_IDS)
        for token_id in ids[:keep]:
            guide.advance(token_id)
        mark = guide.checkpoint()
        for token_id in ids[keep:]:
            guide.advance(token_id)
        assert guide.restore(mark)
        replayed = Guide(index)
        replayed.limit_reasoning(2, states=states, close_ids=CLOSE_IDS)
        for token_id in ids[:keep]:
            replayed.advance(token_id)
        assert guide.checkpoint()[1:] == replayed.checkpoint()[1:]
        assert guide.forced_ids() == replayed.forced_ids()
        assert guide.allowed_mask() == replayed.allowed_mask()
    other = Guide(compile_constraint(VOCAB, regex="ab"))
    assert not other.restore(mark)  # another index's checkpoint: nothing changes
    assert other.state == other.index.initial_state
