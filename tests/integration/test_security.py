"""Who may connect: CURVE on tcp, refused peers, 0700 runtime dir, frame size limits, no pickle.

A service started with ``--curve-dir`` makes every socket it binds a CURVE server that admits only
allow-listed client keys. A peer without an allowed key must get nowhere: its frames never reach
a handler (the processes' frame counters do not move) and it never receives anything. A peer
with the key is served normally. The first test's engine is a small echo engine on raw CURVE
sockets (what an engine with its own sockets does); the last one runs the stub (EngineLink).
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import zmq

from tests.helpers.service import REPO, Service, http_url, run
from textproc.client import TextClient
from textproc.errors import StartupTimeout
from textproc.protocol import (
    ChatRequest,
    EngineAbort,
    EngineHello,
    EngineInFrame,
    EngineRequest,
    EngineStep,
    Hello,
    StepOutput,
)
from textproc.curve import CurveClientKeys, apply_curve_client, load_client_keys, write_curve_keys

pytestmark = pytest.mark.timeout(120)
ANSWER = "hello world"
_enc = msgspec.msgpack.Encoder()


class _EchoEngine(threading.Thread):
    """Answers every EngineRequest with the tokens of ANSWER, over CURVE client sockets."""

    def __init__(self, engine_in: str, engine_out: str, keys: CurveClientKeys | None,
                 answer_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.engine_in, self.engine_out, self.keys = engine_in, engine_out, keys
        self.answer_ids = answer_ids
        self.stop = threading.Event()
        self.requests = 0

    def run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        for sock in (pull, push):
            sock.setsockopt(zmq.LINGER, 0)
            if self.keys is not None:
                apply_curve_client(sock, self.keys)
        pull.connect(self.engine_in)
        push.connect(self.engine_out)
        decoder = msgspec.msgpack.Decoder(EngineInFrame)
        push.send(_enc.encode(EngineHello("echo-engine")))
        step = 0
        while not self.stop.is_set():
            if not pull.poll(50):
                continue
            frame = decoder.decode(pull.recv())
            if isinstance(frame, EngineRequest):
                self.requests += 1
                step += 1
                push.send(_enc.encode(EngineStep(step, [StepOutput(frame.request_id, self.answer_ids, "stop")])))
            else:
                assert isinstance(frame, EngineAbort)
        pull.close(0)
        push.close(0)
        ctx.term()


def _answer_ids(model_dir: Path) -> list[int]:
    from textproc.core.tokenizer import Tokenizer

    ids: list[int] = Tokenizer.from_dir(str(model_dir)).encode(ANSWER, add_special_tokens=False)
    return ids


def _stats_counter(stats: list[Any], role: str, index: int, name: str) -> int:
    for s in stats:
        if s.role == role and s.index == index:
            return int(s.counters.get(name, 0))
    raise AssertionError(f"no stats from {role}-{index}")


def _serve_external(tmp_path: Path, toy_model: Path, args: list[str]) -> tuple[Service, dict[str, str]]:
    service = Service(tmp_path / "s", toy_model, workers=1, engine="external", args=args).start()
    return service, service.engine_addresses()


def test_keys_command_writes_private_zmq_certificates(tmp_path: Path) -> None:
    from zmq.auth import load_certificate

    d = tmp_path / "keys"
    cmd = [sys.executable, "-m", "textproc.cli", "keys", "--dir", str(d)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    names = ["server.key", "server.key_secret", "client.key", "client.key_secret",
             "authorized_clients/client.key"]
    for name in names:
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600, name
    server_pub, server_sec = load_certificate(d / "server.key_secret")
    client_pub, client_sec = load_certificate(d / "client.key_secret")
    assert server_sec is not None and client_sec is not None
    assert zmq.curve_public(server_sec) == server_pub and zmq.curve_public(client_sec) == client_pub
    assert load_certificate(d / "server.key") == (server_pub, None)
    assert load_certificate(d / "authorized_clients/client.key")[0] == client_pub
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "already exist" in again.stderr
    # plain z85 files are accepted too; a secret key others can read is refused
    plain = tmp_path / "plain.key_secret"
    plain.write_text(f"{client_pub.decode()}\n{client_sec.decode()}\n")
    plain.chmod(0o600)
    keys = load_client_keys(client_secret_file=plain, server_public_file=d / "server.key")
    assert (keys.public, keys.secret, keys.server_public) == (client_pub, client_sec, server_pub)
    plain.chmod(0o644)
    with pytest.raises(Exception, match="mode 0644"):
        load_client_keys(client_secret_file=plain, server_public_file=d / "server.key")


def test_non_loopback_tcp_without_keys_is_refused(tmp_path: Path, toy_model: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "textproc.cli", "serve", "--model-dir", str(toy_model),
                          "--workers", "1", "--endpoints", "tcp", "--tcp-host", "0.0.0.0",
                          "--runtime-dir", str(tmp_path / "rt")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2, out.stderr
    assert "refusing to bind tcp host '0.0.0.0' without authentication" in out.stderr
    assert "textproc keys" in out.stderr and "--curve-dir" in out.stderr
    assert not (tmp_path / "rt").exists()


def test_curve_admits_only_allowed_keys(tmp_path: Path, toy_model: Path) -> None:
    keys_dir = tmp_path / "keys"
    write_curve_keys(keys_dir)
    client_keys = load_client_keys(client_secret_file=keys_dir / "client.key_secret",
                                   server_public_file=keys_dir / "server.key")
    service, addresses = _serve_external(
        tmp_path, toy_model, ["--endpoints", "tcp", "--curve-dir", str(keys_dir),
                              "--http", "127.0.0.1:0"])
    intruder_engine = _EchoEngine(addresses["engine_in"], addresses["engine_out"], None, [0])
    engine = _EchoEngine(addresses["engine_in"], addresses["engine_out"], client_keys,
                         _answer_ids(toy_model))
    intruder_engine.start()  # connects first, without keys: must never be given a request
    engine.start()
    info = json.loads((service.runtime_dir / "endpoints.json").read_text())
    ep = {**info["endpoints"], **info["endpoints"]["detokenizers"][0]}  # the one shard's four
    assert all(a.startswith("tcp://127.0.0.1:") for a in ep["workers"] + [ep["detok_front"]])
    assert info["curve"]["server_public_key"] == client_keys.server_public.decode()
    try:
        async def main() -> None:
            async with await TextClient.connect(
                    service.runtime_dir, curve_client_key=keys_dir / "client.key_secret",
                    curve_server_key=keys_dir / "server.key") as client:
                before = await client.stats()

                async def chat(i: int) -> str:
                    text = ""
                    async for ev in client.chat([{"role": "user", "content": f"hi {i}"}]):
                        text += ev.text
                    return text

                assert await asyncio.gather(*(chat(i) for i in range(10))) == [ANSWER] * 10
                # intruders: no key, and a well-formed but unlisted key pair
                ctx = zmq.Context()
                stranger_pub, stranger_sec = zmq.curve_keypair()
                stranger = CurveClientKeys(stranger_pub, stranger_sec, client_keys.server_public)
                socks = []
                for keys in (None, stranger):
                    for address, frame in ((ep["workers"][0], ChatRequest("evil", [{"role": "user", "content": "x"}])),
                                           (ep["detok_front"], Hello())):
                        sock = ctx.socket(zmq.DEALER)
                        sock.setsockopt(zmq.LINGER, 0)
                        if keys is not None:
                            apply_curve_client(sock, keys)
                        sock.connect(address)
                        sock.send(_enc.encode(frame))  # queued; never delivered
                        sock.send(b"\xc1 not msgpack")  # would count as malformed if it arrived
                        socks.append(sock)
                    sub = ctx.socket(zmq.SUB)
                    sub.setsockopt(zmq.SUBSCRIBE, b"")
                    sub.setsockopt(zmq.LINGER, 0)
                    if keys is not None:
                        apply_curve_client(sub, keys)
                    sub.connect(ep["events"])
                    socks.append(sub)
                await asyncio.sleep(1.5)
                assert await asyncio.gather(*(chat(i) for i in range(10))) == [ANSWER] * 10
                for sock in socks:
                    assert not sock.poll(500), "a peer without an allowed key received a frame"
                    sock.close(0)
                ctx.term()
                after = await client.stats()
                # the intruders' frames never reached a handler: nothing malformed arrived, and
                # the worker saw exactly our 20 chats + 1 StatsRequest
                for role, sock_name in (("worker", "worker-0"), ("detokenizer", "detok-front")):
                    counter = f"frames_malformed.{sock_name}"
                    assert _stats_counter(after, role, 0, counter) == _stats_counter(before, role, 0, counter) == 0
                moved = _stats_counter(after, "worker", 0, "frames_received.worker-0") - \
                    _stats_counter(before, "worker", 0, "frames_received.worker-0")
                assert moved == 21, moved
                assert _stats_counter(after, "worker", 0, "requests") - \
                    _stats_counter(before, "worker", 0, "requests") == 21

            # a client with a key the service does not list is never welcomed
            bad = tmp_path / "bad.key_secret"
            pub, sec = zmq.curve_keypair()
            bad.write_text(f"{pub.decode()}\n{sec.decode()}\n")
            bad.chmod(0o600)
            with pytest.raises(StartupTimeout, match="Welcome"):
                await TextClient.connect(service.runtime_dir, timeout_s=2, curve_client_key=bad)
            # local clients default to the service's key pair named in endpoints.json
            async with await TextClient.connect(service.runtime_dir) as local:
                assert [ev.text async for ev in local.chat([{"role": "user", "content": "a"}])] == [ANSWER]

        run(main)
        # the supervised HTTP frontend is a local client: it got the service's key by itself

        url, _ = http_url(service, None)
        body = {"model": toy_model.name, "messages": [{"role": "user", "content": "via http"}]}
        resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"] == ANSWER
        assert intruder_engine.requests == 0, "an engine without the key was given requests"
        assert engine.requests == 22
    finally:
        engine.stop.set()
        intruder_engine.stop.set()
        engine.join(5)
        intruder_engine.join(5)
        service.stop()


def test_private_ipc_dir_and_frame_size_limits_on_every_socket(tmp_path: Path, toy_model: Path) -> None:
    """The runtime dir is 0700 (an existing, too open one is tightened) and holds the sockets,
    which are gone after shutdown; frames over --max-frame-bytes never reach a handler."""
    limit = 64 * 1024
    rt = tmp_path / "s" / "rt"
    rt.mkdir(parents=True)
    rt.chmod(0o755)
    service = Service(tmp_path / "s", toy_model, workers=1,
                      args=["--max-frame-bytes", str(limit)]).start()
    sockets: list[str] = []
    try:
        assert stat.S_IMODE(rt.stat().st_mode) == 0o700
        ep = json.loads((service.runtime_dir / "endpoints.json").read_text())["endpoints"]
        ep = {**ep, **ep["detokenizers"][0]}  # the one shard's four addresses
        sockets = [a[len("ipc://"):] for a in [*ep["workers"], ep["detok_front"], ep["detok_in"],
                                              ep["engine_in"], ep["engine_out"], ep["control"], ep["events"]]]
        assert all(Path(p).parent == rt and stat.S_ISSOCK(os.stat(p).st_mode) for p in sockets)
        assert json.loads((service.runtime_dir / "endpoints.json").read_text())["max_frame_bytes"] == limit
        big = b"\x00" * (limit + 1)

        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as client:
                before = await client.stats()
                ctx = zmq.Context()
                socks = []
                for kind, address in ((zmq.DEALER, ep["workers"][0]), (zmq.DEALER, ep["detok_front"]),
                                      (zmq.PUSH, ep["detok_in"]), (zmq.PUSH, ep["engine_out"]),
                                      (zmq.PUSH, ep["control"])):
                    sock = ctx.socket(kind)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.connect(address)
                    sock.send(big)
                    socks.append(sock)
                try:
                    await asyncio.sleep(1.0)
                    for sock in socks:
                        if sock.type == zmq.DEALER:
                            assert not sock.poll(200), "an oversized frame got an answer"
                finally:
                    for sock in socks:
                        sock.close(0)
                    ctx.term()
                after = await client.stats()
                for role, counter in (("worker", "frames_received.worker-0"),
                                      ("detokenizer", "frames_received.detok-front"),
                                      ("detokenizer", "frames_received.detok-in"),
                                      ("detokenizer", "frames_received.engine-out")):
                    moved = _stats_counter(after, role, 0, counter) - _stats_counter(before, role, 0, counter)
                    assert moved == (1 if counter in ("frames_received.worker-0",
                                                      "frames_received.detok-front") else 0), (counter, moved)
                texts = [ev.text async for ev in client.chat([{"role": "user", "content": "still ok"}])]
                assert "".join(texts) == "still ok"

        run(main)
    finally:
        service.stop()  # asserts no process and no file is left in rt
    assert sockets and not any(Path(p).exists() for p in sockets)


_FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                      "joblib", "multiprocessing"}


def test_no_pickle_or_marshal_anywhere_in_textproc() -> None:
    """Nothing in textproc can turn received bytes into objects except typed msgspec decoders."""
    found = []
    for path in sorted((REPO / "textproc").rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except SyntaxError:  # another helper's file caught mid-write in a shared tree: once more
            time.sleep(1.0)
            tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("__import__", "eval", "exec") and node.args and \
                    isinstance(node.args[0], ast.Constant) and str(node.args[0].value).split(".")[0] in _FORBIDDEN_MODULES:
                names = [str(node.args[0].value)]
            elif isinstance(node, ast.Attribute) and node.attr in ("loads", "load", "Unpickler") and \
                    isinstance(node.value, ast.Name) and node.value.id in _FORBIDDEN_MODULES:
                names = [node.value.id]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names  # type: ignore[attr-defined]
                      if n in _FORBIDDEN_MODULES]
        text = path.read_text()
        for needle in ("pickle.loads", "marshal.loads", "import pickle", "__reduce__"):
            if needle in text:
                found.append(f"{path.relative_to(REPO)}: {needle}")
    assert not found, found
    # and the scan does find them: a planted example
    planted = ast.parse("import pickle\nx = pickle.loads(b'')\n")
    assert any(isinstance(n, ast.Import) and n.names[0].name == "pickle" for n in ast.walk(planted))


@pytest.mark.parametrize("detokenizers", [1, 2])
def test_curve_with_the_stub_engine(tmp_path: Path, toy_model: Path, detokenizers: int) -> None:
    """``serve --engine stub --curve-dir``: the supervisor gives the stub the service's key pair;
    the HTTP frontend here uses the client key pair given on its command line. With two
    detokenizer shards every shard's sockets are CURVE servers too (echo-0 and echo-2 are owned
    by different shards)."""
    keys_dir = tmp_path / "keys"
    write_curve_keys(keys_dir)
    service = Service(tmp_path / "s", toy_model, workers=1,
                      args=["--endpoints", "tcp", "--curve-dir", str(keys_dir), "--http", "127.0.0.1:0",
                            f"--http-arg=--curve-client-key={keys_dir / 'client.key_secret'}",
                            f"--http-arg=--curve-server-key={keys_dir / 'server.key'}",
                            "--detokenizers", str(detokenizers)]).start()
    try:
        async def main() -> list[str]:
            async with await TextClient.connect(
                    service.runtime_dir, curve_client_key=keys_dir / "client.key_secret",
                    curve_server_key=keys_dir / "server.key") as client:
                return ["".join([ev.text async for ev in client.chat(
                    [{"role": "user", "content": f"echo {i}"}], request_id=f"echo-{i}")])
                        for i in range(3)]

        assert run(main) == ["echo 0", "echo 1", "echo 2"]

        url, _ = http_url(service, None)
        body = {"model": toy_model.name, "messages": [{"role": "user", "content": "via http"}]}
        resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
        assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "via http"
    finally:
        service.stop()
