#!/usr/bin/env python3
"""CPU time per short chat request in every process of the service, through the HTTP API
(report what each process spends on a short chat and cut the largest).

    .venv/bin/python bench/chat_cost.py [--quick] [--requests 2000] [--concurrency 16]
        [--max-tokens 16] [--json PATH] [--profile DIR] [--model-dir DIR]

Set-up: ``textproc serve --engine stub --http 127.0.0.1:0`` (stub in random mode, one token per
request per step every ``--step-ms``, default 2 ms) and a load generator in a process of its
own (so its CPU is not the service's): ``--concurrency`` keep-alive connections, each sending
``POST /v1/chat/completions`` one after another, with a different short chat each time (a
one-line system prompt and a ~30-token user turn of mixed real text), ``max_tokens`` 16, first
all not streamed, then all streamed. Per mode: the CPU (utime + stime from /proc) each service
process used between the first and the last request, divided by the requests; requests/s and
the client-side latency p50/p99. ``--profile DIR``: py-spy on the HTTP process for each mode
(raw stacks in DIR and the top frames printed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import Serve, make_prompts, pct, print_table, write_json

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.machine import describe, machine


def _request(host: str, model: str, prompt: str, max_tokens: int, stream: bool) -> bytes:
    body = json.dumps({"model": model, "max_tokens": max_tokens, "stream": stream,
                       "messages": [{"role": "system", "content": "You are terse."},
                                    {"role": "user", "content": prompt}]}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class _Conn:
    """One keep-alive HTTP/1.1 connection; reads a whole response (Content-Length or chunked)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        status = int(self._line().split()[1])
        headers: dict[str, str] = {}
        while line := self._line():
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            return status, self._exactly(int(headers["content-length"]))
        body = []
        while size := int(self._line().split(b";")[0], 16):
            body.append(self._exactly(size))
            self._exactly(2)
        self._line()  # the empty line after the last chunk
        return status, b"".join(body)


def _load_main(argv: list[str]) -> int:
    """The load generator (a process of its own): prints one JSON line of results."""
    p = argparse.ArgumentParser()
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--prompts")
    p.add_argument("--model")
    p.add_argument("--requests", type=int)
    p.add_argument("--concurrency", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--stream", action="store_true")
    a = p.parse_args(argv)
    prompts = json.loads(Path(a.prompts).read_text())
    counter = iter(range(a.requests))
    lock = threading.Lock()
    lat: list[float] = []
    errors: list[str] = []
    go = threading.Event()

    def run() -> None:
        conn = _Conn(a.host, a.port)
        go.wait()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            status, body = conn.roundtrip(_request(a.host, a.model, prompts[i % len(prompts)],
                                                   a.max_tokens, a.stream))
            dt = time.perf_counter() - t0
            if status != 200 or (a.stream and not body.rstrip().endswith(b"data: [DONE]")):
                errors.append(f"{status}: {body[:200]!r}")
            lat.append(dt)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent has read the CPU counters
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "lat": lat, "errors": errors[:5], "n_errors": len(errors)}),
          flush=True)
    return 0


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.is_file():
        print("(py-spy not installed: no profile)", file=sys.stderr)
        return None
    return subprocess.Popen([str(exe), "record", "--pid", str(pid), "--rate", "250", "--format",
                             "raw", "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _top_frames(raw: Path, n: int = 15) -> list[tuple[int, str]]:
    own: dict[str, int] = {}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or not stack:
            continue
        frame = stack.split(";")[-1]
        own[frame] = own.get(frame, 0) + int(count)
    return sorted(((v, k) for k, v in own.items()), reverse=True)[:n]


def _one_mode(serve: Serve, host: str, port: int, prompts_file: Path, args: argparse.Namespace,
              stream: bool, profile: Path | None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_load", "--host", host, "--port",
           str(port), "--model", args.served_model, "--prompts", str(prompts_file), "--requests", str(args.requests),
           "--concurrency", str(args.concurrency), "--max-tokens", str(args.max_tokens)]
    if stream:
        cmd.append("--stream")
    load = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert load.stdin is not None and load.stdout is not None
    if load.stdout.readline().strip() != "ready":
        raise RuntimeError("the load generator did not start")
    spy = _py_spy(serve.pids()["http"], profile / f"http-{'stream' if stream else 'whole'}.raw") \
        if profile else None
    cpu0 = serve.cpu()
    load.stdin.write("go\n")
    load.stdin.flush()
    result = json.loads(load.stdout.readline())
    cpu1 = serve.cpu()
    load.wait(30)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT, not SIGTERM
        spy.wait(30)
    n = args.requests
    per = {name: (cpu1[name] - cpu0.get(name, 0.0)) / n * 1000 for name in cpu1}
    row: dict[str, Any] = {
        "bench": "chat-cost", "stream": stream, "requests": n, "concurrency": args.concurrency,
        "max_tokens": args.max_tokens, "errors": result["n_errors"],
        "rps": n / result["wall_s"], "lat_ms_p50": pct(result["lat"], 50) * 1000,
        "lat_ms_p99": pct(result["lat"], 99) * 1000, "load_avg_1m": os.getloadavg()[0],
        "cpu_ms_per_request": {k: round(v, 4) for k, v in per.items()},
        "cpu_ms_per_request_total": round(sum(per.values()), 4),
    }
    if result["errors"]:
        row["first_errors"] = result["errors"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="200 requests per mode (unless --requests)",
                     json_help="append one JSON line per mode")
    p.add_argument("--requests", type=int, default=None, help="requests per mode (default 2000)")
    p.add_argument("--concurrency", type=int, default=16, help="connections (default 16)")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per request (default 16)")
    p.add_argument("--step-ms", type=float, default=2.0, help="the stub's step cadence (default 2)")
    p.add_argument("--workers", type=int, default=2, help="tokenizer workers (default 2)")
    p.add_argument("--profile", type=Path, default=None, help="py-spy the HTTP process into DIR")
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 200 if args.quick else 2000
    model = model_dir_arg(p, args.model_dir)
    from tokenizers import Tokenizer as HFTokenizer

    prompts = make_prompts(HFTokenizer.from_file(str(model / "tokenizer.json")), 30, 400, seed=5)
    info = machine()
    print(f"chat-cost: {describe(info)}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="tp-chat-cost-"))
    prompts_file = root / "prompts.json"
    prompts_file.write_text(json.dumps(prompts))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    serve = Serve(model, workers=args.workers, engine="stub",
                  extra=["--stub-mode", "random", f"--stub-arg=--step-ms={args.step_ms:g}",
                         "--http", "127.0.0.1:0"])
    rows = []
    try:
        http_file = serve.runtime_dir / "http.json"
        deadline = time.monotonic() + 60
        while not http_file.is_file():
            if time.monotonic() > deadline:
                raise RuntimeError("no HTTP frontend:\n" + serve.log()[-3000:])
            time.sleep(0.05)
        http = json.loads(http_file.read_text())
        with urllib.request.urlopen(f"http://{http['host']}:{http['port']}/v1/models",
                                    timeout=30) as resp:
            args.served_model = json.loads(resp.read())["data"][0]["id"]
        warm = argparse.Namespace(**{**vars(args), "requests": 100})
        _one_mode(serve, http["host"], int(http["port"]), prompts_file, warm, False, None)
        for stream in (False, True):
            rows.append(_one_mode(serve, http["host"], int(http["port"]), prompts_file, args,
                                  stream, args.profile))
    finally:
        serve.close()
    names = sorted({k for r in rows for k in r["cpu_ms_per_request"]},
                   key=lambda k: (k != "http", not k.startswith("worker"), k))
    flat = [{**r, **{f"cpu:{k}": r["cpu_ms_per_request"].get(k) for k in names}} for r in rows]
    print()
    print_table(flat, [("stream", "stream", ""), ("req/s", "rps", ".0f"), ("err", "errors", "d"),
                       ("lat p50", "lat_ms_p50", ".2f"), ("lat p99", "lat_ms_p99", ".2f"),
                       *[(k, f"cpu:{k}", ".3f") for k in names],
                       ("all", "cpu_ms_per_request_total", ".3f"), ("load", "load_avg_1m", ".1f")])
    print(f"(CPU ms per request per process; {args.requests} short chats per mode, "
          f"{args.concurrency} connections, max_tokens {args.max_tokens}, stub step "
          f"{args.step_ms:g} ms; latency = whole request at the client, ms)")
    if args.profile:
        for stream in (False, True):
            raw = args.profile / f"http-{'stream' if stream else 'whole'}.raw"
            if raw.is_file():
                print(f"\nHTTP process, stream={stream}: top frames by own samples")
                for count, frame in _top_frames(raw):
                    print(f"  {count:6d}  {frame}")
    write_json(args.json, rows, info)
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["_load"]:
        raise SystemExit(_load_main(sys.argv[2:]))
    raise SystemExit(main())
