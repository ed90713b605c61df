"""textproc's side of vLLM's own engines: the routing policy and the wire frames (decoded here
as msgpack; ``tests/integration/test_vllm_wire.py`` decodes them with vLLM's own classes)."""

from __future__ import annotations

import dataclasses
import json
from array import array
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.engine import IncomingRequest
from textproc.errors import InvalidInput
from textproc.vllm_front import wire
from textproc.vllm_front.launch import (
    CPU_WORKER,
    NO_DRAFTS,
    engine_flags,
    headless_command,
    rank_cpu_binding,
)
from textproc.vllm_front.routing import PrefixRouter, block_keys


def _ids(*runs: tuple[int, int]) -> array[int]:
    out = array("I")
    for start, n in runs:
        out.extend(range(start, start + n))
    return out


def _router(n: int = 2, **kw: Any) -> PrefixRouter:
    router = PrefixRouter(n, block_size=4, **kw)
    for i in range(n):
        router.ready(i, capacity_blocks=100)
    return router


def test_block_keys_name_whole_prefixes() -> None:
    a = block_keys(_ids((0, 10)), 4)
    b = block_keys(_ids((0, 8), (100, 5)), 4)
    assert len(a) == 2 and len(b) == 3  # whole blocks only
    assert a == b[:2]  # the same first 8 ids: the same keys
    c = block_keys(_ids((1, 10)), 4)
    assert not set(a) & set(c)
    assert block_keys(list(_ids((0, 10))), 4) == a  # a list keys as the packed array does


def test_a_conversation_goes_back_to_the_engine_that_holds_its_prefix() -> None:
    router = _router()
    first, keys = router.choose(_ids((0, 40)))
    router.routed(first, keys)
    other, keys2 = router.choose(_ids((1000, 40)))  # an unrelated prompt: the idle engine
    assert other != first
    router.routed(other, keys2)
    router.finished(first)
    router.finished(other)
    again, _ = router.choose(_ids((0, 40), (500, 12)))  # the conversation, one turn on
    assert again == first
    assert router.matched_blocks == 10


def test_an_overloaded_engine_loses_its_prefix_advantage() -> None:
    router = _router(overload_margin=3)
    rank, keys = router.choose(_ids((0, 40)))
    router.routed(rank, keys)
    for _ in range(3):  # three more on the same engine: now 4 ahead of the other
        router.routed(rank, [])
    chosen, _ = router.choose(_ids((0, 40)))
    assert chosen != rank
    router.stats(1 - rank, waiting=0, kv_usage=0.99)  # the other's KV cache is full: the load decides
    assert router.choose(_ids((0, 40)))[0] == 1 - rank


def test_dead_and_unready_engines_take_nothing() -> None:
    router = PrefixRouter(3, block_size=4)
    assert router.choose(_ids((0, 8)))[0] == -1
    router.ready(2)
    assert router.choose(_ids((0, 8)))[0] == 2
    router.ready(0)
    rank, keys = router.choose(_ids((0, 8)))
    router.routed(rank, keys)
    router.gone(rank)
    assert router.engines[rank].cached == {} and not router.engines[rank].ready
    assert router.choose(_ids((0, 8)))[0] == 2 - rank


def test_round_robin_and_least_loaded() -> None:
    router = _router(3, policy="round_robin")
    assert [router.choose(_ids((0, 8)))[0] for _ in range(4)] == [0, 1, 2, 0]
    router = _router(2, policy="least_loaded")
    router.routed(0, [])
    assert router.choose(_ids((0, 8))) == (1, [])
    with pytest.raises(ValueError, match="routing policy"):
        PrefixRouter(1, policy="random")


def test_the_prefix_cache_model_evicts_a_prompts_tail_first() -> None:
    router = PrefixRouter(1, block_size=4)
    router.ready(0, capacity_blocks=4)
    router.routed(0, block_keys(_ids((0, 24)), 4))  # 6 blocks into room for 4
    assert len(router.engines[0].cached) == 4
    assert router.choose(_ids((0, 24)))[0] == 0 and router.matched_blocks == 4


@given(st.lists(st.integers(0, 50), min_size=0, max_size=40), st.integers(1, 6))
def test_match_is_the_longest_routed_prefix(prompt: list[int], extra: int) -> None:
    router = PrefixRouter(1, block_size=3)
    router.ready(0)
    router.routed(0, block_keys(prompt, 3))
    longer = prompt + list(range(900, 900 + extra * 3))
    before = router.matched_blocks
    router.choose(longer)
    assert router.matched_blocks - before == len(prompt) // 3


def _request(**kw: Any) -> IncomingRequest:
    base: dict[str, Any] = dict(request_id="r1", prompt_token_ids=array("I", [1, 2, 3]),
                                max_tokens=16, stop_token_ids=[7], sampling={"temperature": 0.0},
                                constraint=None, min_tokens=0, ignore_eos=False)
    base.update(kw)
    return IncomingRequest(**base)


def test_sampling_params_are_vllms_non_defaults() -> None:
    params = wire.sampling_params(_request(eos_token_ids=[5, 6], stop_token_ids=[7, 5, 6],
                                           logprobs=2, logit_bias={9: -100.0}, min_tokens=2))
    assert params["max_tokens"] == 16 and params["min_tokens"] == 2
    assert params["temperature"] == 0.0 and params["logprobs"] == 2
    assert params["detokenize"] is False and params["skip_special_tokens"] is False
    assert sorted(params["stop_token_ids"]) == [5, 6, 7]
    assert params["_all_stop_token_ids"] == [5, 6, 7]
    assert params["logit_bias"] == {9: -100.0}
    assert "structured_outputs" not in params
    ignoring = wire.sampling_params(_request(eos_token_ids=[5], ignore_eos=True))
    assert ignoring["stop_token_ids"] == [7] and ignoring["_all_stop_token_ids"] == [5, 7]
    budget = {"max_reasoning_tokens": 8, "reasoning_close": "</think>", "top_p": None}
    guided = wire.sampling_params(_request(index_key="k1", sampling=budget))
    assert guided["structured_outputs"] == {"regex": "textproc-index:k1", "_backend": "textproc"}
    assert guided["extra_args"] == {"textproc": {"max_reasoning_tokens": 8,
                                                 "reasoning_close": "</think>"}}


def test_an_add_frame_is_an_engine_core_request_array() -> None:
    data = wire.add_request("r1", array("I", [1, 2]), {"max_tokens": 4}, 12.5)
    fields = msgspec.msgpack.decode(data)
    assert fields == ["r1", [1, 2], None, {"max_tokens": 4}, None, 12.5, None, None, None]
    with_priority = msgspec.msgpack.decode(wire.add_request("r1", [1], {}, 1.0, priority=3))
    assert with_priority[13] == 3
    assert msgspec.msgpack.decode(wire.utility_call(4, "m", ["k", {"a": b"x"}])) == \
        [0, 4, "m", ["k", {"a": b"x"}]]
    reply = msgspec.msgpack.decode(wire.handshake_reply(["tcp://a:1"], ["tcp://a:2"]))
    assert reply["addresses"]["inputs"] == ["tcp://a:1"] and reply["parallel_config"] == {}


def test_outputs_decode_with_logprobs_inline_and_in_frames() -> None:
    enc = msgspec.msgpack.Encoder()
    ids = array("i", [10, 11, 12, 20, 21, 22])  # 2 rows of [sampled, top1, top2]
    values = array("f", [-0.5, -0.5, -1.0, -0.25, -0.25, -2.0])
    inline = [["<i4", [2, 3], msgspec.msgpack.Ext(3, ids.tobytes())],
              ["<f4", [2, 3], msgspec.msgpack.Ext(3, values.tobytes())],
              ["<i4", [2], msgspec.msgpack.Ext(3, array("i", [0, 0]).tobytes())], None]
    step = [0, [["r1", [10, 20], inline, None, None, 1, None, None, None, None, None,
                 {"num_prompt_tokens": 5, "num_cached_tokens": 4}, None, 0, None, None]],
            {"num_running_reqs": 1, "num_waiting_reqs": 2, "kv_cache_usage": 0.5}, 1.0]
    out = wire.decode_outputs([enc.encode(step)])
    (entry,) = out.outputs
    assert entry.request_id == "r1" and entry.new_token_ids == [10, 20]
    assert wire.FINISH_REASONS[entry.finish_reason] == "length"
    assert entry.prefill_stats["num_cached_tokens"] == 4
    assert out.scheduler_stats["num_waiting_reqs"] == 2
    logprobs, top = wire.logprob_rows(entry.new_logprobs)
    assert logprobs == list(values) and top == [11, 12, 21, 22]
    framed = [["<i4", [2, 3], 1], ["<f4", [2, 3], 2], ["<i4", [2], 3], None]
    step[1][0][2] = framed
    out = wire.decode_outputs([enc.encode(step), ids.tobytes(), values.tobytes(), b"\0" * 8])
    assert wire.logprob_rows(out.outputs[0].new_logprobs) == (list(values), [11, 12, 21, 22])


def test_unreadable_frames_are_named() -> None:
    enc = msgspec.msgpack.Encoder()
    with pytest.raises(ValueError, match="ext type 1"):
        wire.decode_outputs([enc.encode([0, [["r", [1], msgspec.msgpack.Ext(1, b"x")]]])])
    with pytest.raises(ValueError, match="EngineCoreReadyResponse"):
        wire.decode_ready(enc.encode({"status": "HELLO"}))
    with pytest.raises(ValueError, match="handshake"):
        wire.decode_handshake(enc.encode([1, 2]))


def test_an_idle_engines_last_stats_keep_no_work_away() -> None:
    router = _router()
    router.routed(0, [])
    router.stats(0, waiting=9, kv_usage=0.99)  # sent with its last busy step
    assert router.choose(_ids((0, 8)))[0] == 1
    router.finished(0)  # nothing left there: no step will update those stats
    assert router.engines[0].kv_usage == 0.0 and router.engines[0].waiting == 0
    router.routed(1, [])
    assert router.choose(_ids((0, 8)))[0] == 0


def test_each_local_rank_gets_its_part_of_vllms_cpu_binding() -> None:
    """VLLM_CPU_OMP_THREADS_BIND as vLLM's own data-parallel launch reads it: the
    ``|``-separated lists in rank order, as many per rank as it has workers; a rank launched
    alone (as the front launches each) would take the first, so every engine would share it."""
    assert [rank_cpu_binding("0|1", r, 2) for r in range(2)] == ["0", "1"]
    assert [rank_cpu_binding("0-3|4-7|8-11|12-15", r, 2) for r in range(2)] == ["0-3|4-7", "8-11|12-15"]
    assert rank_cpu_binding("0-1|2-3", 0, 1) == "0-1|2-3"  # one rank here: all of it
    for value in ("auto", "nobind", "0-3", "0|1|2"):  # not one part per rank: left as it is
        assert rank_cpu_binding(value, 1, 2) == value


def test_the_headless_command_turns_fast_forward_into_vllms_speculative_config() -> None:
    """``textproc engine ... --fast-forward K`` (and ``--engine-arg=--fast-forward=K`` with
    several engines) is vLLM's own flag for textproc's drafter; a bad K, or a speculative
    config of the user's own beside it, is refused naming the flag."""
    command = headless_command("/env/bin/python", "M", size=2, rank=1, address="10.0.0.1",
                               rpc_port=5555, args=["--dtype", "float32", "--fast-forward", "4"])
    assert command[:3] == ["/env/bin/vllm", "serve", "M"] and "--fast-forward" not in command
    at = command.index("--speculative-config")
    assert json.loads(command[at + 1]) == {"method": "custom_class", "model": NO_DRAFTS,
                                           "num_speculative_tokens": 4}
    assert command[command.index("--worker-cls") + 1] == CPU_WORKER
    assert command[command.index("--dtype") + 1] == "float32"
    assert engine_flags(["--fast-forward=2"])[-1] == json.dumps(
        {"method": "custom_class", "model": NO_DRAFTS, "num_speculative_tokens": 2})
    assert engine_flags(["--max-num-seqs", "8"]) == ["--max-num-seqs", "8"]
    for bad in (["--fast-forward"], ["--fast-forward=0"], ["--fast-forward", "x"]):
        with pytest.raises(InvalidInput, match="--fast-forward takes a positive number"):
            engine_flags(bad)
    with pytest.raises(InvalidInput, match="drop --speculative-config or --fast-forward"):
        engine_flags(["--fast-forward=2", "--speculative-config", "{}"])


def test_a_vllm_engine_writes_its_gauges_for_metrics_by_default(tmp_path: Any) -> None:
    """With ``--engine vllm`` and no stats file of the user's, the engine gets the runtime
    dir's file with ``--stats-brief`` (its scheduler's gauges for /metrics, not its
    per-request records); a file the user names gets everything; engine_vllm takes the flag."""
    from engine_vllm.startup import parse_args
    from textproc.config import ServeConfig, ServiceConfig
    from textproc.launchers import engine_adapter

    adapter = engine_adapter("vllm")
    base = ServeConfig(service=ServiceConfig(model_dir=str(tmp_path)), engine="vllm",
                       engine_python="/env/bin/python")
    brief = adapter.command(dataclasses.replace(base, stub_stats_file="/rt/engine-stats.json",
                                                engine_stats_brief=True), ["in"], ["out"])
    assert brief is not None and "--stats-brief" in brief
    assert brief[brief.index("--stats-file") + 1] == "/rt/engine-stats.json"
    full = adapter.command(dataclasses.replace(base, stub_stats_file="/mine.json"), ["in"], ["out"])
    assert full is not None and "--stats-brief" not in full and "/mine.json" in full
    engine = full[full.index("-m") + 2:] + ["--stats-brief"]
    settings = parse_args(engine)
    assert settings.stats_brief and settings.stats_file == "/mine.json" and not settings.vllm_args[2:]


@pytest.mark.parametrize("config, n", [
    ({"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8}, 128),
    ({"model_type": "mixtral", "num_local_experts": 8}, 8),
    ({"model_type": "deepseek_v3", "n_routed_experts": 256}, 256),
    ({"model_type": "qwen3_vl_moe", "text_config": {"num_experts": 64}}, 64),
    ({"model_type": "qwen3", "num_experts": 0}, 0),
    ({"model_type": "qwen3"}, 0)])
def test_a_mixture_of_experts_is_known_by_its_config(tmp_path: Any, config: dict[str, Any], n: int) -> None:
    from textproc.launchers.vllm import check_dense_ranks, experts

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert experts(tmp_path) == n
    check_dense_ranks(tmp_path, 1)  # one engine: vLLM's own engine core, any model
    if n:
        with pytest.raises(InvalidInput, match=f"mixture of experts \\({n} experts"):
            check_dense_ranks(tmp_path, 2)
    else:
        check_dense_ranks(tmp_path, 2)


def test_serve_and_engine_refuse_data_parallel_experts_before_starting(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM steps a mixture of experts' ranks in lockstep through its DP coordinator; without
    it the ranks would wait for each other's all-gather: both commands say so and start nothing."""
    import shutil

    from textproc.cli import main
    from textproc.testing.models import REPO_ROOT

    shutil.copy(REPO_ROOT / ".cache" / "models" / "qwen3" / "tokenizer.json", tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 4}))
    assert main(["serve", "--engine", "vllm", "--model-dir", str(tmp_path), "--data-parallel-size", "2"]) == 2
    assert "mixture of experts (4 experts" in capsys.readouterr().err
    assert main(["engine", "--model-dir", str(tmp_path), "--headless", "--data-parallel-size", "2",
                 "--data-parallel-start-rank", "1", "--data-parallel-address", "127.0.0.1",
                 "--data-parallel-rpc-port", "5555"]) == 2
    assert "DP coordinator" in capsys.readouterr().err
