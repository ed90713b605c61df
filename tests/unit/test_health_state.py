"""The --health port's answer from the frontends' state records (textproc.http.health):
what each frontend publishes is what the health process reads, a torn record is not trusted,
and the answer is 200 while at least one frontend serves with a live loop."""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from pathlib import Path

from textproc.http.health import StatePublisher, answer, read_state


def test_a_published_state_reads_back(tmp_path: Path) -> None:
    pub = StatePublisher(tmp_path / "http-0.health", stale_after_s=3.0)
    pub.publish(True, "", 0.0125)
    state = read_state(tmp_path / "http-0.health")
    assert state is not None
    assert state["serving"] and state["reason"] == "" and state["loop_lag_s"] == 0.0125
    assert state["stale_after_s"] == 3.0 and 0 <= state["loop_age_s"] < 3
    assert state["pid"] == os.getpid() and state["alive"]
    pub.publish(False, "waiting for the detokenizer ✓", 0.0)  # rewritten in place
    state = read_state(tmp_path / "http-0.health")
    assert state is not None and not state["serving"]
    assert state["reason"] == "waiting for the detokenizer ✓"
    pub.close()


def test_a_torn_or_missing_record_is_no_state(tmp_path: Path) -> None:
    path = tmp_path / "http-0.health"
    assert read_state(path) is None
    StatePublisher(path).publish(True, "", 0.0)
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF  # a read that raced a write: the CRC does not match
    path.write_bytes(bytes(data))
    assert read_state(path) is None
    path.write_bytes(b"short")
    assert read_state(path) is None


def test_the_answer_is_ok_while_one_frontend_serves(tmp_path: Path) -> None:
    paths = [tmp_path / "http-0.health", tmp_path / "http-1.health"]
    status, body = answer(paths)
    assert status == 503
    assert "frontend 0: the frontend has not started" in json.loads(body)["reason"]
    StatePublisher(paths[1]).publish(True, "", 0.001)
    status, body = answer(paths)
    got = json.loads(body)
    assert status == 200 and got["status"] == "ok"
    assert [f["status"] for f in got["frontends"]] == ["unavailable", "ok"]
    StatePublisher(paths[0], stale_after_s=0.05).publish(True, "", 0.0)
    StatePublisher(paths[1]).publish(False, "the frontend is shutting down", 0.0)
    time.sleep(0.1)  # frontend 0's loop has now "not run" for longer than its 0.05 s
    status, body = answer(paths)
    got = json.loads(body)
    assert status == 503, got
    assert "event loop has not run" in got["frontends"][0]["reason"]
    assert got["frontends"][1]["reason"] == "the frontend is shutting down"


def test_a_frontend_that_is_gone_is_not_serving(tmp_path: Path) -> None:
    """A frontend killed with -9 leaves a record that looks fine until it goes stale: the pid
    in it says the process is gone."""
    path = tmp_path / "http-0.health"
    StatePublisher(path).publish(True, "", 0.0)
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 24, gone)  # the record's pid (after three float64s)
    body = bytes(data[:-4])
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    status, text = answer([path])
    assert status == 503, text
    assert f"(pid {gone}) is not running" in json.loads(text)["reason"]
