"""engine_stub as a real process: echo / replay / random, limits, stop ids, aborts, batching.

The textproc side is bound here with plain pyzmq (PUSH for engine-in, PULL for engine-out); the
expected answers come from the textproc Tokenizer on the toy model, cross-checked against HF
``tokenizers`` for the echo text.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.engine_peer import ENC, OUT, EnginePeer, as_step
from tests.helpers.service import REPO
from textproc.protocol import (
    EngineAbort,
    EngineHello,
    EngineRequest,
    EngineStep,
    pack_ids,
)
from textproc.core.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(60)


class Stub(EnginePeer):
    """``python -m engine_stub`` with the textproc side bound here; collects its steps."""

    def __init__(self, tmp_path: Path, model_dir: Path | None, *args: str) -> None:
        super().__init__(tmp_path)
        self.stats_path = tmp_path / "stats.json"
        cmd = [sys.executable, "-m", "engine_stub", "--engine-in", self.engine_in,
               "--engine-out", self.engine_out, "--stats-file", str(self.stats_path),
               "--stats-interval-s", "0.1", *args]
        if model_dir is not None:
            cmd += ["--model-dir", str(model_dir)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.steps: list[EngineStep] = []
        self.results: dict[str, list[int]] = {}
        self.reasons: dict[str, str] = {}
        hello = self.recv(timeout_s=20)
        assert isinstance(hello, EngineHello), hello
        self.hello = hello

    def request(self, request_id: str, prompt: list[int], max_tokens: int = 100, **kw: Any) -> None:
        self.send(EngineRequest(request_id, pack_ids(prompt), max_tokens, **kw))

    def silence(self, timeout_s: float) -> str:
        return f"engine_stub sent nothing for {timeout_s} s; log:\n{self.log()}"

    def recv(self, timeout_s: float = 10.0) -> Any:
        return as_step(super().recv(timeout_s))

    def collect(self, request_ids: list[str], timeout_s: float = 20.0) -> None:
        """Read steps until every id in ``request_ids`` has a finish reason."""
        deadline = time.monotonic() + timeout_s
        while any(r not in self.reasons for r in request_ids):
            frame = self.recv(max(0.1, deadline - time.monotonic()))
            assert isinstance(frame, EngineStep)
            self.steps.append(frame)
            for out in frame.outputs:
                assert out.request_id not in self.reasons, f"output after finish: {out}"
                self.results.setdefault(out.request_id, []).extend(out.token_ids)
                if out.finish_reason is not None:
                    self.reasons[out.request_id] = out.finish_reason

    def stats(self, *, when: Any = None, timeout_s: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                stats: dict[str, Any] = json.loads(self.stats_path.read_text())
                if when is None or when(stats):
                    return stats
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"stats never matched in {timeout_s} s")
            time.sleep(0.05)

    def log(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"engine_stub pid {self.proc.pid} ignored SIGTERM for 10 s")
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.close()
        return code


@pytest.fixture(scope="module")
def tok(toy_model: Path) -> Tokenizer:
    return Tokenizer.from_dir(toy_model)


@pytest.fixture
def make_stub(tmp_path: Path, toy_model: Path) -> Iterator[Any]:
    stubs: list[Stub] = []

    def make(*args: str, model_dir: Path | None = toy_model) -> Stub:
        stub = Stub(tmp_path, model_dir, *args)
        stubs.append(stub)
        return stub

    yield make
    for stub in stubs:
        assert stub.stop() == 0, f"engine_stub exit status {stub.proc.returncode}"


def chat_prompt(tok: Tokenizer, user: str) -> list[int]:
    text = (f"<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")
    return tok.encode(text)


def stop_ids(tok: Tokenizer) -> list[int]:
    return [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]  # type: ignore[list-item]


USER_TEXTS = [
    "Hello world!",
    "<think>brief</think>The answer is 4.",
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    "你好，世界 😀 👨‍👩‍👧 café",
    "",
]


def test_echo_answers_the_last_user_message_one_token_per_step(make_stub: Any, tok: Tokenizer,
                                                               toy_model: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(toy_model / "tokenizer.json"))
    stub = make_stub()
    eos = tok.eos_token_id
    assert eos == tok.token_to_id("<|im_end|>")
    for i, text in enumerate(USER_TEXTS):
        stub.request(f"c{i}", chat_prompt(tok, text), stop_token_ids=stop_ids(tok))
    stub.collect([f"c{i}" for i in range(len(USER_TEXTS))])
    for i, text in enumerate(USER_TEXTS):
        want = hf.encode(text, add_special_tokens=False).ids + [eos]
        assert stub.results[f"c{i}"] == want, text
        assert stub.reasons[f"c{i}"] == "stop"
        assert tok.decode(stub.results[f"c{i}"], skip_special_tokens=True) == text
    assert all(len(o.token_ids) <= 1 for s in stub.steps for o in s.outputs)


def test_echo_of_a_completion_prompt_and_the_end_token_choice(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub()
    prompt = tok.encode("The quick brown fox")
    eot = tok.token_to_id("<|endoftext|>")
    assert eot is not None
    stub.request("p1", prompt, stop_token_ids=[eot])  # EOS not a stop id: the first stop id ends it
    stub.request("p2", prompt)  # no stop ids at all: the script repeats until max_tokens
    # ignore_eos as textproc sends it: the EOS ids are not stop ids, only masked until min_tokens
    eos = tok.eos_token_id
    assert eos is not None
    n = len(prompt)
    stub.request("p3", prompt, 50, eos_token_ids=stop_ids(tok), ignore_eos=True)
    stub.request("p4", prompt, 3 * n + 1, eos_token_ids=stop_ids(tok), ignore_eos=True,
                 min_tokens=n + 2)
    stub.request("p5", prompt, 50, stop_token_ids=[eos], eos_token_ids=stop_ids(tok), ignore_eos=True)
    stub.collect(["p1", "p2", "p3", "p4", "p5"])
    assert stub.results["p1"] == prompt + [eot] and stub.reasons["p1"] == "stop"
    assert stub.reasons["p2"] == "length" and len(stub.results["p2"]) == 100
    cycle = prompt + [eos]
    assert stub.results["p2"] == (cycle * 100)[:100]
    # ignore_eos: EOS (<|im_end|>) is not a stop; it keeps cycling
    assert stub.results["p3"] == (cycle * 50)[:50] and stub.reasons["p3"] == "length"
    # ... and before min_tokens it is masked (vLLM masks all_stop_token_ids): the first lap's
    # EOS is skipped, the second's comes out and does not stop it
    assert stub.results["p4"] == prompt + prompt + [eos] + prompt and stub.reasons["p4"] == "length"
    # a stop id the request names itself stops it even under ignore_eos (vLLM's stop_token_ids)
    assert stub.results["p5"] == cycle and stub.reasons["p5"] == "stop"


def test_max_tokens_stop_ids_and_min_tokens(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--tokens-per-step", "2")
    answer = tok.encode("one two three four five six seven")
    prompt = chat_prompt(tok, "one two three four five six seven")
    mid = answer[3]
    stub.request("len", prompt, 4, stop_token_ids=stop_ids(tok))
    stub.request("stop", prompt, stop_token_ids=[mid, *stop_ids(tok)])
    # the mid token is masked until 5 tokens were generated: the first stop is the second lap's
    stub.request("min", prompt, min_tokens=len(answer) + 2, stop_token_ids=[mid, *stop_ids(tok)])
    stub.request("one", prompt, 1, stop_token_ids=stop_ids(tok))
    stub.collect(["len", "stop", "min", "one"])
    assert stub.results["len"] == answer[:4] and stub.reasons["len"] == "length"
    assert stub.results["one"] == answer[:1] and stub.reasons["one"] == "length"
    assert stub.results["stop"] == answer[:4] and stub.reasons["stop"] == "stop"
    without_stops = [t for t in answer if t != mid]  # stop ids are skipped while masked
    got = stub.results["min"]
    assert stub.reasons["min"] == "stop" and got[-1] == mid
    assert got[: len(without_stops)] == without_stops
    assert len(got) - 1 >= len(answer) + 2
    assert max(len(o.token_ids) for s in stub.steps for o in s.outputs) == 2
    stats = stub.stats(when=lambda s: s["finished"]["stop"] == 2)
    entry = stats["requests"]["len"]
    assert entry["generated"] == 4 and entry["finish_reason"] == "length", entry
    assert isinstance(entry["ended_at"], float)
    assert stats["finished"] == {"stop": 2, "length": 2, "abort": 0}


def test_abort_stops_generation_and_shows_in_stats(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--step-ms", "5")
    prompt = chat_prompt(tok, "word " * 400)
    stub.request("long", prompt, 1000, stop_token_ids=stop_ids(tok))
    stub.request("queued-gone", prompt, 10)  # aborted while running too
    got = 0
    while got < 10:
        step = stub.recv()
        got += sum(len(o.token_ids) for o in step.outputs if o.request_id == "long")
    stub.send(EngineAbort(["long", "queued-gone", "never-seen"]))
    stats = stub.stats(when=lambda s: "long" in s["aborted"])
    n = stats["requests"]["long"]["generated"]
    assert stats["requests"]["long"]["finish_reason"] == "abort"
    assert 10 <= n < 100
    # nothing more for it: drain what was in flight, then silence
    seen = got
    while stub.pull.poll(300):
        frame = as_step(OUT.decode(stub.pull.recv()))
        seen += sum(len(o.token_ids) for o in frame.outputs if o.request_id == "long")
        assert all(o.finish_reason != "abort" for o in frame.outputs)  # dropped, not reported
    assert seen == n
    later = stub.stats(when=lambda s: s["written_at"] > stats["written_at"] + 0.2)
    assert later["requests"]["long"]["generated"] == n


def test_report_aborts_flag_sends_an_abort_output(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--report-aborts", "--step-ms", "5")
    stub.request("r", chat_prompt(tok, "word " * 100), 500)
    stub.recv()
    stub.send(EngineAbort(["r"]))
    stub.collect(["r"])
    assert stub.reasons["r"] == "abort"


def test_continuous_batching_caps_running_requests(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--max-batch", "3")
    prompt = chat_prompt(tok, "Hello world! The quick brown fox")
    ids = [f"b{i}" for i in range(8)]
    for rid in ids:
        stub.request(rid, prompt, stop_token_ids=stop_ids(tok))
    stub.collect(ids)
    want = tok.encode("Hello world! The quick brown fox") + [tok.eos_token_id]
    assert all(stub.results[r] == want for r in ids)
    assert max(len(s.outputs) for s in stub.steps) == 3
    first_step = {r: min(i for i, s in enumerate(stub.steps) for o in s.outputs if o.request_id == r)
                  for r in ids}
    assert first_step["b3"] >= len(want) - 1  # waited for a slot
    stats = stub.stats(when=lambda s: s["finished"]["stop"] == 8)
    assert stats["max_running_seen"] == 3
    assert stats["step_ms"]["samples"] == stats["steps"] > 0


def test_random_mode_is_seeded_and_never_emits_special_ids(make_stub: Any, tok: Tokenizer,
                                                            tmp_path: Path, toy_model: Path) -> None:
    stub = make_stub("--mode", "random", "--seed", "7", "--tokens-per-step", "4")
    stub.request("x", [1, 2, 3], 64, stop_token_ids=stop_ids(tok))
    stub.request("y", [1, 2, 3], 64, stop_token_ids=stop_ids(tok))
    stub.collect(["x", "y"])
    assert stub.reasons == {"x": "length", "y": "length"}
    assert len(stub.results["x"]) == 64 and stub.results["x"] != stub.results["y"]
    assert not set(stub.results["x"]) & tok.special_ids
    assert max(stub.results["x"]) < tok.vocab_size
    first = stub.results["x"]
    assert stub.stop() == 0
    for seed, same in [("7", True), ("8", False)]:
        again = Stub(tmp_path, toy_model, "--mode", "random", "--seed", seed)
        try:
            again.request("x", [1], 64)
            again.collect(["x"])
            assert (again.results["x"] == first) is same, f"seed {seed}"
        finally:
            assert again.stop() == 0


def test_random_mode_applies_logit_bias(make_stub: Any, tok: Tokenizer) -> None:
    """EngineRequest.logit_bias (protocol 4): +100 forces a token, -100 bans it."""
    stub = make_stub("--mode", "random", "--seed", "3", "--tokens-per-step", "4")
    plain = [t for t in range(tok.vocab_size) if t not in tok.special_ids]
    stub.request("forced", [1], 20, logit_bias={plain[5]: 100.0, plain[9]: 100.0})
    stub.request("banned", [1], 40, logit_bias={t: -100.0 for t in plain[2:]})
    stub.request("mild", [1], 20, logit_bias={plain[0]: 5.0})
    stub.collect(["forced", "banned", "mild"])
    assert set(stub.results["forced"]) == {plain[5], plain[9]}
    assert set(stub.results["banned"]) <= set(plain[:2]) and len(stub.results["banned"]) == 40
    assert len(set(stub.results["mild"])) > 2  # in between: sampling stays uniform


def test_replay_mode_replays_the_file(make_stub: Any, tok: Tokenizer, tmp_path: Path) -> None:
    text = "def add(a, b):\n    return a + b\n"
    path = tmp_path / "replay.txt"
    path.write_text(text)
    stub = make_stub("--mode", "replay", "--replay-file", str(path))
    stub.request("r", [5, 6], stop_token_ids=stop_ids(tok))
    stub.collect(["r"])
    assert stub.results["r"] == tok.encode(text) + [tok.eos_token_id]


def test_step_ms_sets_the_step_time(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--step-ms", "20", "--step-busy")
    stub.request("s", chat_prompt(tok, "word " * 20), 15)
    stub.collect(["s"])
    stats = stub.stats(when=lambda s: s["steps"] >= 15)
    assert stats["busy_units_per_step"] > 0
    # Busy work is calibrated once at start, so on a loaded machine its wall time drifts;
    # only the sleeping mode gives a hard lower bound (sleep never returns early).
    assert stats["step_ms"]["p50"] > 0


def test_step_ms_sleep_mode_waits_at_least_the_step_time(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub("--step-ms", "20")
    stub.request("s", chat_prompt(tok, "word " * 20), 15)
    stub.collect(["s"])
    stats = stub.stats(when=lambda s: s["steps"] >= 15)
    assert stats["busy_units_per_step"] == 0
    assert stats["step_ms"]["p50"] >= 19.5


def test_malformed_frames_on_engine_in_are_counted_not_fatal(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub()
    for data in [b"garbage", ENC.encode(["Nope", 1]), ENC.encode(["EngineRequest", 1, 2, 3]),
                 ENC.encode(EngineStep(1, []))]:
        stub.send(data)
    stub.send(EngineRequest("bad", b"\x01\x02", 5))  # prompt not a multiple of 4 bytes
    stub.request("good", chat_prompt(tok, "still fine"), stop_token_ids=stop_ids(tok))
    stub.collect(["bad", "good"])
    assert stub.reasons == {"bad": "error", "good": "stop"}
    stats = stub.stats(when=lambda s: s["link"]["malformed_frames"] == 5)
    assert stats["link"]["rejected_requests"] == 1
    assert stub.proc.poll() is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--mode echo needs --model-dir"),
        (["--model-dir", "/nonexistent-dir"], "has no tokenizer.json"),
        (["--mode", "replay", "--model-dir", "{toy}"], "--mode replay needs --replay-file"),
        (["--mode", "random"], "needs --model-dir or --vocab-size"),
        (["--model-dir", "{toy}", "--max-batch", "0"], "--max-batch: must be >= 1"),
        (["--model-dir", "{toy}", "--step-ms", "-1"], "--step-ms: must be >= 0"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(toy_model: Path, args: list[str], message: str) -> None:
    args = [a.replace("{toy}", str(toy_model)) for a in args]
    out = subprocess.run([sys.executable, "-m", "engine_stub", "--engine-in", "ipc:///tmp/x-in",
                          "--engine-out", "ipc:///tmp/x-out", *args],
                         cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert message in out.stderr


def test_sigint_exits_cleanly_and_writes_final_stats(make_stub: Any, tok: Tokenizer) -> None:
    stub = make_stub()
    stub.request("q", chat_prompt(tok, "bye"), stop_token_ids=stop_ids(tok))
    stub.collect(["q"])
    stub.proc.send_signal(signal.SIGINT)
    assert stub.proc.wait(timeout=10) == 0
    stats = stub.stats()
    assert stats["requests"]["q"]["finish_reason"] == "stop"
    assert stats["pid"] == stub.proc.pid and stats["instance_id"] == stub.hello.instance_id
    assert not [p for p in os.listdir(stub.stats_path.parent) if p.endswith(".tmp")]
