"""The engine's ids through the detokenizer's state machine (``RequestTable``), no processes:
a request with ``OutputOptions.return_token_ids`` (the token-in / token-out generate route) gets
on its outputs every id the engine generated, in order, each once, for any split of the ids
into engine steps, with or without logprobs, a stop string or special tokens in the text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from textproc.config import ServiceConfig
from textproc.options import OutputOptions
from textproc.protocol import (
    EngineRequest,
    EngineStep,
    StepOutput,
    Submit,
    pack_ids,
    unpack_ids,
)
from textproc.service.request_table import RequestTable

pytestmark = pytest.mark.timeout(120)

ENC = msgspec.msgpack.Encoder()
_TOKENIZERS: dict[Path, Any] = {}


def _tok(toy_model: Path) -> Any:
    from textproc.core.tokenizer import Tokenizer

    if toy_model not in _TOKENIZERS:
        _TOKENIZERS[toy_model] = Tokenizer.from_dir(toy_model)
    return _TOKENIZERS[toy_model]


def _run(toy_model: Path, ids: list[int], cuts: list[int], output: OutputOptions,
         finish: str | None) -> tuple[list[int], str, str | None, list[list[int]]]:
    """Feed ``ids`` split at ``cuts`` (the last step ends with ``finish``): the ids of the
    outputs joined, the text, the finish reason, and each output's ids."""
    table = RequestTable(_tok(toy_model), ServiceConfig(model_dir=str(toy_model)))
    engine_request = ENC.encode(EngineRequest("r", pack_ids([1]), 500))
    table.on_submit(Submit("r", b"c", 1, 500, engine_request, output=output))
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    outputs = []
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        last = n == len(bounds) - 2
        table.on_step(EngineStep(n, [StepOutput("r", ids[a:b], finish if last else None)]))
        outputs += table.outbox.pop(b"c", [])
    per_output = [unpack_ids(o.ids.token_ids) if o.ids is not None else [] for o in outputs]
    text = "".join(d.get("content", "") for o in outputs for d in o.deltas)
    reason = next((o.finish_reason for o in outputs if o.finish_reason), None)
    return [i for part in per_output for i in part], text, reason, per_output


TEXT = "Ids out: 你好 🦜, stop here ### and not this."


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 60), max_size=12))
def test_every_generated_id_comes_out_once_in_order(toy_model: Path, cuts: list[int]) -> None:
    tok = _tok(toy_model)
    ids = tok.encode(TEXT) + [tok.eos_token_id]
    got, text, reason, per_output = _run(toy_model, ids, cuts,
                                         OutputOptions(return_token_ids=True), "stop")
    assert got == ids and text == TEXT and reason == "stop"
    assert all(per_output[:-1])  # each step with ids gave an output carrying them


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 60), max_size=12), logprobs=st.sampled_from([None, 0]))
def test_a_stop_string_ends_the_ids_where_the_engine_stopped(toy_model: Path, cuts: list[int],
                                                              logprobs: int | None) -> None:
    tok = _tok(toy_model)
    ids = tok.encode(TEXT)
    output = OutputOptions(return_token_ids=True, stop=["###"], logprobs=logprobs)
    got, text, reason, _ = _run(toy_model, ids, cuts, output, None)
    assert text == TEXT[:TEXT.index("###")] and reason == "stop"
    # every id of the steps up to the one that completed the stop string (the engine is
    # aborted there); with one id per step (the engine's usual step) the ids end with it
    assert got == ids[:len(got)] and "###" in tok.decode(got)
    one_by_one, _, _, _ = _run(toy_model, ids, list(range(len(ids))), output, None)
    assert tok.decode(one_by_one).endswith("###")


def test_without_the_option_no_ids_travel(toy_model: Path) -> None:
    tok = _tok(toy_model)
    got, text, _, _ = _run(toy_model, tok.encode(TEXT), [3, 9], OutputOptions(), "length")
    assert got == [] and text == TEXT


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, 60), max_size=12), k=st.integers(0, 3),
       wider=st.integers(0, 2))
def test_each_id_keeps_its_logprob_row(toy_model: Path, cuts: list[int], k: int,
                                       wider: int) -> None:
    """With logprobs k, each id's row (its logprob, then k alternatives) comes with it, cut
    to k when the step's rows are wider (another request asked more)."""
    from textproc.protocol import unpack_floats

    tok = _tok(toy_model)
    ids = tok.encode(TEXT) + [tok.eos_token_id]
    width = 1 + k + wider

    def row(pos: int) -> tuple[list[float], list[int]]:
        return ([-(pos + i) / 4 for i in range(width)],
                [(ids[pos] + i) % 400 for i in range(1, width)])

    table = RequestTable(tok, ServiceConfig(model_dir=str(toy_model)))
    table.on_submit(Submit("r", b"c", 1, 500, ENC.encode(EngineRequest("r", pack_ids([1]), 500)),
                           output=OutputOptions(return_token_ids=True, logprobs=k)))
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    outputs = []
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        floats = [f for pos in range(a, b) for f in row(pos)[0]]
        alts = [t for pos in range(a, b) for t in row(pos)[1]]
        table.on_step(EngineStep(n, [StepOutput("r", ids[a:b], "stop" if b == len(ids) else None,
                                                floats, alts)]))
        outputs += table.outbox.pop(b"c", [])
    runs = [o.ids for o in outputs if o.ids is not None]
    got_ids = [i for run in runs for i in unpack_ids(run.token_ids)]
    got_rows = [f for run in runs for f in unpack_floats(run.logprobs)]
    got_alts = [t for run in runs for t in unpack_ids(run.top_ids)]
    assert got_ids == ids
    assert got_rows == pytest.approx([f for pos in range(len(ids)) for f in row(pos)[0][:1 + k]])
    assert got_alts == [t for pos in range(len(ids)) for t in row(pos)[1][:k]]
