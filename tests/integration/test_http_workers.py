"""Several HTTP frontends on one port (``serve --http-workers 2``) and the health port
that answers while a frontend's event loop is blocked (``--health``).

Real processes: the supervisor binds the port once and each frontend serves the shared socket;
every response names its frontend (``x-textproc-frontend``), so the tests see where each
connection went. Bounds are generous functional ones (a loaded 2-core box), never timings.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.service import REPO, Service, build_toy_model, wait_http

pytestmark = pytest.mark.timeout(120)


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _http_info(service: Service) -> dict[str, Any]:
    return dict(json.loads((service.runtime_dir / "http.json").read_text()))


def _metric_lines(url: str, prefix: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """Two frontends on one port; the random-mode stub at 5 ms a step (a 300-token stream
    lasts ~1.5 s), a health port."""
    root = tmp_path_factory.mktemp("http-workers")
    model = build_toy_model(root / "toy")
    args = ["--http", "127.0.0.1:0", "--http-workers", "2", "--health", "127.0.0.1:0",
            "--stub-mode", "random", "--stub-arg=--step-ms=5"]
    service = Service(root, model, workers=1, args=args).start()
    try:
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
        yield service, url
    finally:
        service.stop()


def _stream(url: str, max_tokens: int, out: dict[str, Any]) -> None:
    """POST one streamed chat on a connection of its own; record the frontend that answered,
    the events read and how it ended ("done", or the error)."""
    out["events"] = 0
    try:
        with httpx.Client(timeout=httpx.Timeout(30, connect=10)) as http, http.stream(
                "POST", url + "/v1/chat/completions",
                json={"model": "toy", "messages": _user("hi"), "stream": True,
                      "max_tokens": max_tokens, "ignore_eos": True}) as resp:
            out["status"] = resp.status_code
            out["frontend"] = resp.headers.get("x-textproc-frontend")
            for line in resp.iter_lines():
                if line == "data: [DONE]":
                    out["end"] = "done"
                    return
                if line.startswith("data: "):
                    out["events"] += 1
                    if out["events"] == 1:  # the role chunk (random text may hold U+2028,
                        out["id"] = json.loads(line[6:])["id"]  # where iter_lines splits)
                    if out["events"] == 3:
                        out["streaming"] = True
            out["end"] = "no [DONE]"
    except httpx.HTTPError as e:
        out["end"] = f"error: {type(e).__name__}"


def _streams(url: str, n: int, max_tokens: int) -> tuple[list[dict[str, Any]], list[threading.Thread]]:
    results: list[dict[str, Any]] = [{} for _ in range(n)]
    threads = [threading.Thread(target=_stream, args=(url, max_tokens, r), daemon=True)
               for r in results]
    for t in threads:
        t.start()
    return results, threads


def test_two_frontends_share_the_port_and_both_stream(pair: tuple[Service, str]) -> None:
    service, url = pair
    info = _http_info(service)
    assert len(info["pids"]) == 2 and len(set(info["pids"])) == 2, info
    assert service.pids()["http-1"] == info["pids"][1]
    results, threads = _streams(url, 24, 200)
    for t in threads:
        t.join(60)
    assert all(r.get("status") == 200 and r.get("end") == "done" for r in results), results
    served = {r["frontend"] for r in results}
    assert served == {"0", "1"}, f"every stream went to frontend {served}"
    # /metrics, whichever frontend answers, sums both (prometheus_client's shared files, which
    # each frontend brings up to date every second)
    time.sleep(1.5)
    for _ in range(4):
        lines = _metric_lines(url, "textproc_http_frontend_requests_total{")
        assert sorted(k.split('"')[1] for k in lines) == ["0", "1"], lines
        total = _metric_lines(url, "textproc_http_requests_total{")
        assert total['textproc_http_requests_total{endpoint="/v1/chat/completions",'
                     'status="200"}'] >= 24, total
        assert sum(lines.values()) >= 24, lines


def test_a_frontend_killed_fails_only_its_own_connections(pair: tuple[Service, str]) -> None:
    service, url = pair
    pids = _http_info(service)["pids"]
    # long streams (~2000 steps of 5 ms); retry until both frontends hold some
    for _ in range(5):
        results, threads = _streams(url, 16, 2000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(r.get("streaming") or r.get("end")
                                                      for r in results):
            time.sleep(0.05)
        if {r.get("frontend") for r in results if r.get("streaming")} == {"0", "1"}:
            break
        for t in threads:
            t.join(60)
    else:
        pytest.fail("16 concurrent streams never went to both frontends")
    time.sleep(1.2)  # each frontend hands its numbers to the metrics files every second
    before = _metric_lines(url, "textproc_requests_running")["textproc_requests_running"]
    assert before >= 2, before  # both frontends' streams
    os.kill(pids[1], signal.SIGKILL)
    for t in threads:
        t.join(60)
    mine = [r for r in results if r.get("frontend") == "1"]
    others = [r for r in results if r.get("frontend") == "0"]
    assert mine and all(r["end"] != "done" for r in mine), mine
    assert others and all(r["end"] == "done" for r in others), others
    # the killed frontend's requests are aborted in the engine (its outputs are unroutable)
    deadline = time.monotonic() + 30
    while True:
        entries = service.stub_stats().get("requests", {})
        reasons = [entries.get(r["id"], {}).get("finish_reason") for r in mine]
        if all(reason == "abort" for reason in reasons):
            break
        assert time.monotonic() < deadline, reasons
        time.sleep(0.5)
    # restarted on the same port; frontend 0 was never touched
    deadline = time.monotonic() + 30
    while True:
        info = _http_info(service)
        if info["pids"][1] not in (None, pids[1]):
            break
        assert time.monotonic() < deadline, f"frontend 1 not restarted:\n{service.log()}"
        time.sleep(0.1)
    assert info["pids"][0] == pids[0] and info["port"] == int(url.rsplit(":", 1)[1])
    results, threads = _streams(url, 24, 50)
    for t in threads:
        t.join(60)
    assert all(r.get("end") == "done" for r in results), results
    # the killed frontend's requests in flight left /metrics' sum with it (the supervisor
    # marked its pid dead), its counters stay listed
    time.sleep(1.5)  # every frontend's last second handed over
    running = _metric_lines(url, "textproc_requests_running")
    assert running == {"textproc_requests_running": 0.0}, running
    served = _metric_lines(url, "textproc_http_frontend_requests_total{")
    assert any(f'pid="{pids[1]}"' in key for key in served), served


def test_the_health_port_answers_for_every_frontend(pair: tuple[Service, str]) -> None:
    service, _ = pair
    health = _http_info(service)["health"]
    probe = f"http://{health['host']}:{health['port']}/health"
    resp = httpx.get(probe, timeout=10)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "ok", body
    assert [f["frontend"] for f in body["frontends"]] == [0, 1], body
    assert all(f["status"] == "ok" and f["loop_age_s"] < 10 for f in body["frontends"]), body
    assert httpx.get(f"http://{health['host']}:{health['port']}/v1/models",
                     timeout=10).status_code == 404
    # the health process is supervised like the others: killed, it is back on the same port
    pid = service.pids()["health"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(probe, timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the health port did not come back:\n{service.log()}"
        time.sleep(0.1)
    assert service.pids()["health"] != pid


@pytest.mark.parametrize("flag,workers", [("--http", 1), ("--http", 2), ("--health", 2)])
def test_a_port_in_use_fails_the_start_naming_the_address(tmp_path: Path, toy_model: Path,
                                                          flag: str, workers: int) -> None:
    """Not 'textproc ready' and frontends restarted forever: exit 1, quickly, naming it."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        ports = {"--http": "127.0.0.1:0", "--health": "127.0.0.1:0", flag: f"127.0.0.1:{port}"}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "textproc.cli", "serve", "--model-dir", str(toy_model),
             "--workers", "1", "--runtime-dir", str(tmp_path / "rt"), "--http", ports["--http"],
             "--health", ports["--health"], "--http-workers", str(workers)],
            cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        took = time.monotonic() - started
    log = done.stdout + done.stderr
    assert done.returncode == 1, log[-3000:]
    assert f"cannot listen on 127.0.0.1:{port} ({flag})" in log, log[-3000:]
    assert "textproc ready" not in log and "restarting" not in log, log[-3000:]
    assert took < 30, took
    assert not (tmp_path / "rt").exists() or not list((tmp_path / "rt").iterdir())


def test_the_health_port_answers_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    """A handler that blocks the frontend's loop (the --test-hooks route) stops the API port,
    /health included; the health port (its own process) still answers, says 503 once the loop
    has been stuck for --health-stale-after, and 200 again after. Probes that connected and sent
their request meanwhile are answered where the frontend accepts them (textproc.http.probe)."""
    model = build_toy_model(tmp_path / "toy")
    args = ["--http", "127.0.0.1:0", "--health", "127.0.0.1:0", "--http-arg=--test-hooks",
            "--http-arg=--health-stale-after=1"]
    service = Service(tmp_path, model, workers=1, args=args).start()
    try:
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
        health = _http_info(service)["health"]
        probe = f"http://{health['host']}:{health['port']}/health"
        assert httpx.get(probe, timeout=10).status_code == 200
        blocker = threading.Thread(target=lambda: httpx.post(
            url + "/_test/block-loop?seconds=8", timeout=30), daemon=True)
        blocker.start()
        deadline = time.monotonic() + 20
        while True:  # wait until the API port stops answering: the loop is blocked
            try:
                httpx.get(url + "/health", timeout=1)
            except httpx.TimeoutException:
                break
            assert time.monotonic() < deadline, "the loop was never blocked"
            time.sleep(0.1)
        answers = []
        deadline = time.monotonic() + 20
        while blocker.is_alive() and time.monotonic() < deadline:
            resp = httpx.get(probe, timeout=5)  # answered, never a timeout
            answers.append((resp.status_code, resp.json()))
            if resp.status_code == 503:
                break
            time.sleep(0.2)
        assert answers and answers[-1][0] == 503, answers
        assert "event loop has not run" in answers[-1][1]["reason"], answers[-1]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        probes = [socket.create_connection((host, int(port)), timeout=30) for _ in range(5)]
        for s in probes:  # whole requests waiting with their connections: answered on accept
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        blocker.join(30)
        for s in probes:
            with s:
                got = b"".join(iter(lambda s=s: s.recv(65536), b""))  # to a clean end
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK"), got
            assert b"x-textproc-frontend: 0" in head and b"connection: close" in head, got
            assert json.loads(body) == {"status": "ok"}
        on_accept = _metric_lines(url, "textproc_http_health_on_accept_total")
        assert on_accept["textproc_http_health_on_accept_total"] >= 5, on_accept
        with httpx.Client(timeout=10) as keep_alive:  # a second request on one connection:
            for _ in range(2):  # uvicorn's route, the same answer
                assert keep_alive.get(url + "/health").json() == {"status": "ok"}
        deadline = time.monotonic() + 20
        while httpx.get(probe, timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the health port never recovered"
            time.sleep(0.2)
        assert httpx.get(url + "/health", timeout=10).status_code == 200
    finally:
        service.stop()


def test_processes_json_lists_the_frontend_at_its_first_healthy_health(tmp_path: Path) -> None:
    """A tool that polls /health and reads processes.json at the first 200 finds the HTTP
    frontend there: its pid is written when it is spawned, not after its address file (which a
    frontend writes after it already answers /health)."""
    model = build_toy_model(tmp_path / "toy")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = Service(tmp_path, model, workers=1, args=["--http", f"127.0.0.1:{port}"])
    starter = threading.Thread(target=service.start, daemon=True)
    starter.start()
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=1) as http:
            while True:
                assert time.monotonic() < deadline, f"no healthy /health:\n{service.log()}"
                try:
                    if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.002)
        procs = json.loads((service.runtime_dir / "processes.json").read_text())
        assert procs.get("http") and procs["http_frontends"] == {"0": procs["http"]}, procs
    finally:
        starter.join(60)
        service.stop()
