"""Logprobs through the detokenizer's state machine (``RequestTable``), no processes.

The contract: for a request with ``Submit.logprobs = k``, the entries of its outputs, joined,
have bytes that concatenate to its content (after stop strings, with the token the stop cuts
keeping its bytes before the cut), k alternatives each, in order; for any split of the ids into
engine steps (packed or per-request rows) the entries are the same as for one step. Steps whose
logprob rows do not fit their ids are malformed (counted by the loop, nothing done).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, strategies as st

from textproc.config import ServiceConfig
from textproc.core.logprobs import MISSING_LOGPROB, token_text
from textproc.errors import ProtocolError
from textproc.options import OutputOptions, ParseOptions
from textproc.protocol import (
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    StepOutput,
    Submit,
    pack_floats,
    pack_ids,
)
from textproc.service.request_table import RequestTable

pytestmark = pytest.mark.timeout(120)

ENC = msgspec.msgpack.Encoder()
K = 2
_TABLES: dict[Path, Any] = {}


def _tok(toy_model: Path) -> Any:
    from textproc.core.tokenizer import Tokenizer

    if toy_model not in _TABLES:
        _TABLES[toy_model] = Tokenizer.from_dir(toy_model)
    return _TABLES[toy_model]


def _row(pos: int, token_id: int, vocab: int) -> tuple[list[float], list[int]]:
    value = -(pos % 7 + 1) / 8
    return [value, value - 1, value - 2], [(token_id + 1) % vocab, (token_id + 2) % vocab]


def _table(toy_model: Path, *, logprobs: int | None = K, stop: list[str] | None = None,
           include_stop: bool = False, rid: str = "r") -> RequestTable:
    tok = _tok(toy_model)
    table = RequestTable(tok, ServiceConfig(model_dir=str(toy_model)))
    engine_request = ENC.encode(EngineRequest(rid, pack_ids([1]), 500, logprobs=logprobs))
    table.on_submit(Submit(rid, b"c", 1, 500, engine_request, output=OutputOptions(
        stop=stop or [], include_stop=include_stop, logprobs=logprobs)))
    return table


def _packed(step: int, parts: list[tuple[str, list[int], int]], vocab: int,
            finished: dict[int, str] | None = None) -> EngineStepPacked:
    """``parts``: (request id, new ids, position of the first) -> one packed step with rows."""
    floats: list[float] = []
    alts: list[int] = []
    for _, ids, pos in parts:
        for j, t in enumerate(ids):
            f, a = _row(pos + j, t, vocab)
            floats += f
            alts += a
    return EngineStepPacked(step, [p[0] for p in parts], pack_ids([t for p in parts for t in p[1]]),
                            pack_ids([len(p[1]) for p in parts]), finished or {},
                            pack_floats(floats), pack_ids(alts))


def _legacy(step: int, parts: list[tuple[str, list[int], int]], vocab: int,
            finished: dict[int, str] | None = None) -> EngineStep:
    outs = []
    for index, (rid, ids, pos) in enumerate(parts):
        rows = [_row(pos + j, t, vocab) for j, t in enumerate(ids)]
        outs.append(StepOutput(rid, ids, (finished or {}).get(index),
                               [v for f, _ in rows for v in f], [v for _, a in rows for v in a]))
    return EngineStep(step, outs)


def _run(table: RequestTable, frames: list[Any]) -> tuple[str, list[Any], str | None]:
    text, entries, reason = "", [], None
    for frame in frames:
        table.on_step(msgspec.msgpack.decode(ENC.encode(frame), type=type(frame)))
        for item in table.outbox.pop(b"c", []):
            if item.request_id != "r":
                continue
            text += "".join(d.get("content", "") for d in item.deltas)
            entries += item.logprobs or []
            reason = item.finish_reason or reason
        table.outbox.clear()
    return text, entries, reason


def _steps(ids: list[int], cuts: list[int], vocab: int, packed: bool,
           end: str = "length") -> list[Any]:
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    make = _packed if packed else _legacy
    frames = [make(i, [("r", ids[a:b], a)], vocab) for i, (a, b) in
              enumerate(zip(bounds, bounds[1:]))]
    frames.append(make(len(frames), [("r", [], len(ids))], vocab, {0: end}))
    return frames


TEXTS = st.lists(st.sampled_from(["ab", " cd", "é", "😀", "中文", "STOP", "\n", "x", "ST"]),
                 min_size=1, max_size=12).map("".join)


@given(text=TEXTS, cuts=st.lists(st.integers(0, 40), max_size=6), packed=st.booleans(),
       stop=st.sampled_from([None, ["STOP"], ["😀"], ["d\n"]]), include_stop=st.booleans())
def test_any_split_gives_the_same_entries_and_they_join_to_the_content(
        toy_model: Path, text: str, cuts: list[int], packed: bool, stop: list[str] | None,
        include_stop: bool) -> None:
    tok = _tok(toy_model)
    ids = tok.encode(text)
    vocab = tok.vocab_size
    whole = _run(_table(toy_model, stop=stop, include_stop=include_stop),
                 _steps(ids, [], vocab, True))
    split = _run(_table(toy_model, stop=stop, include_stop=include_stop),
                 _steps(ids, cuts, vocab, packed))
    assert split == whole
    content, entries, reason = whole
    assert reason in ("stop", "length")
    assert b"".join(e[1] for e in entries) == content.encode()
    assert all(len(e[3]) == K for e in entries)
    # every entry but a cut last one is a whole token of the output, in order
    assert [e[0] for e in entries][:-1] == ids[:max(len(entries) - 1, 0)]
    if stop is None:
        assert [e[0] for e in entries] == ids and content == text


def test_entries_carry_the_engine_numbers_and_alternative_bytes(toy_model: Path) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("ab 😀")
    vocab = tok.vocab_size
    _, entries, _ = _run(_table(toy_model), _steps(ids, [1, 2, 3], vocab, True))
    for pos, (token_id, data, logprob, alt_ids, alt_bytes, alt_lps) in enumerate(entries):
        f, a = _row(pos, token_id, vocab)
        assert data == tok.token_bytes(token_id) and logprob == f[0]
        assert (alt_ids, alt_lps) == (a, f[1:])
        assert alt_bytes == [tok.token_bytes(t, skip_special_tokens=False) for t in a]
    split = [token_text(e[1]) for e in entries if not e[1].decode("utf-8", "ignore")]
    assert all(t.startswith("bytes:\\x") for t in split)  # the emoji's partial tokens


def test_k_zero_and_fewer_than_sent(toy_model: Path) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("ab cd")
    for k, want in ((0, 0), (1, 1), (5, K)):  # the engine sent K alternatives
        _, entries, _ = _run(_table(toy_model, logprobs=k), _steps(ids, [], tok.vocab_size, True))
        assert entries and all(len(e[3]) == want for e in entries)


def test_requests_without_logprobs_get_none_and_the_same_text(toy_model: Path) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("ab cd")
    plain = _run(_table(toy_model, logprobs=None), _steps(ids, [2], tok.vocab_size, True))
    assert plain == ("ab cd", [], "length")
    # a request without logprobs beside one with them: rows for both, entries only for one
    table = _table(toy_model)
    table.on_submit(Submit("p", b"c", 1, 500, ENC.encode(EngineRequest("p", pack_ids([1]), 500))))
    table.on_step(_packed(0, [("r", ids, 0), ("p", ids, 0)], tok.vocab_size, {0: "stop", 1: "stop"}))
    items = {item.request_id: item for item in table.outbox[b"c"]}
    assert items["p"].logprobs is None and len(items["r"].logprobs or []) == len(ids)


def test_eos_has_no_entry(toy_model: Path) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("ab") + [tok.eos_token_id]
    content, entries, reason = _run(_table(toy_model), _steps(ids, [], tok.vocab_size, True,
                                                              end="stop"))
    assert content == "ab" and reason == "stop" and [e[0] for e in entries] == ids[:-1]


def test_rows_missing_for_a_request_that_asked_are_counted(toy_model: Path) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("ab cd")
    table = _table(toy_model)
    table.on_step(EngineStep(0, [StepOutput("r", ids, "length")]))
    entries = table.outbox[b"c"][-1].logprobs or []
    assert [e[2] for e in entries] == [MISSING_LOGPROB] * len(ids)
    assert table.counters["logprobs_missing"] == len(ids)


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (EngineStepPacked(1, ["r"], pack_ids([5, 6]), pack_ids([2]), {}, pack_floats([0.0] * 5), b""),
         "5 logprobs for 2 new ids"),
        (EngineStepPacked(1, ["r"], pack_ids([5]), b"", {}, pack_floats([0.0] * 3),
                          pack_ids([1])), "1 top_ids for 1 new ids with 2"),
        (EngineStepPacked(1, ["r"], pack_ids([5]), b"", {}, b"\x00", b""), "multiple of 4"),
        (EngineStepPacked(1, ["r"], b"", pack_ids([0]), {}, pack_floats([0.0]), b""),
         "1 logprobs for 0 new ids"),
        (EngineStep(1, [StepOutput("r", [5], None, [0.0, 1.0], [])]),
         "request 'r': 0 top_ids for 1 new ids with 1"),
    ],
)
def test_malformed_logprob_rows_refuse_the_step(toy_model: Path, frame: Any, why: str) -> None:
    table = _table(toy_model)
    before = dict(table.counters)
    with pytest.raises(ProtocolError, match=why):
        table.on_step(frame)
    assert table.counters == before and table.outbox == {} and set(table.live) == {"r"}


def test_reasoning_tokens_have_entries_too() -> None:
    """With a reasoning parser the entries cover the raw output (think tags, reasoning and
    content, in order): what vLLM's chat endpoint does; docs/architecture.md "Logprobs"."""
    from tests.helpers.models import model_dir
    from textproc.core.tokenizer import Tokenizer

    model = model_dir("qwen3")
    tok = Tokenizer.from_dir(model)
    raw = "<think>\nwhy 🦜?\n</think>\n\nAn answer: 你好"
    ids = tok.encode(raw)
    table = RequestTable(tok, ServiceConfig(model_dir=str(model)))
    table.on_submit(Submit("r", b"c", 1, 500, ENC.encode(EngineRequest("r", pack_ids([1]), 500)),
                           output=OutputOptions(logprobs=1), parse=ParseOptions(reasoning=True)))
    content, entries, reason = _run(table, _steps(ids, [3, 5], tok.vocab_size, True))
    assert content == "An answer: 你好" and reason == "length"
    assert b"".join(e[1] for e in entries) == raw.encode()
    assert [e[0] for e in entries] == ids


@pytest.mark.parametrize("packed", [True, False])
def test_outputs_before_their_submit_keep_their_rows(toy_model: Path, packed: bool) -> None:
    tok = _tok(toy_model)
    ids = tok.encode("early 🦜 bird")
    frames = _steps(ids, [2, 4], tok.vocab_size, packed)
    want = _run(_table(toy_model), frames)
    table = RequestTable(tok, ServiceConfig(model_dir=str(toy_model)))
    for frame in frames[:2]:  # the engine's first steps overtake the Submit: buffered
        table.on_step(msgspec.msgpack.decode(ENC.encode(frame), type=type(frame)))
    assert set(table.early) == {"r"} and table.outbox == {}
    engine_request = ENC.encode(EngineRequest("r", pack_ids([1]), 500, logprobs=K))
    table.on_submit(Submit("r", b"c", 1, 500, engine_request, output=OutputOptions(logprobs=K)))
    # on_submit replays the buffered steps into the outbox; _run collects them with the rest
    assert _run(table, frames[2:]) == want


def test_a_finished_request_leaves_the_tracked_set(toy_model: Path) -> None:
    tok = _tok(toy_model)
    table = _table(toy_model)
    assert table.tracked == {"r"}
    _run(table, _steps(tok.encode("done"), [], tok.vocab_size, True))
    assert table.tracked == set()  # later steps take the plain path again
