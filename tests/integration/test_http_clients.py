"""Slow and tricky HTTP clients: ambiguous framing, slowloris headers, slow bodies,
too many connections, 405 with Allow. A real service behind the HTTP frontend with short
deadlines (``--header-timeout 1 --body-timeout 1 --max-connections 16``), driven over raw
sockets so nothing in between fixes the bytes.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.helpers.prom import value
from tests.helpers.service import Service, build_toy_model, wait_http

pytestmark = pytest.mark.timeout(60)

MAX_CONNECTIONS = 16


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    root = tmp_path_factory.mktemp("http-clients")
    model = build_toy_model(root / "toy")
    args = ["--http", "127.0.0.1:0", "--http-arg=--header-timeout=1",
            "--http-arg=--body-timeout=1", f"--http-arg=--max-connections={MAX_CONNECTIONS}"]
    service = Service(root, model, workers=1, args=args).start()
    try:
        yield service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()


def _connect(url: str) -> socket.socket:
    address = urlsplit(url)
    assert address.hostname and address.port
    return socket.create_connection((address.hostname, address.port), timeout=5)


def _read_all(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (fails on a timeout)."""
    sock.settimeout(timeout_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _counter(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    assert f"\n{name} " in text, f"no {name} in /metrics"
    return value(text, name)


def test_transfer_encoding_with_content_length_is_400_and_closed(
        stack: tuple[Service, str]) -> None:
    url = stack[1]
    body = b'{"prompt": "hi"}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    with _connect(url) as sock:
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"transfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n" + chunked)
        reply = _read_all(sock)  # and the server closed the connection
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply[:300]
    assert b"connection: close" in head.lower()
    assert "Transfer-Encoding and Content-Length" in json.loads(payload)["error"]["message"]
    assert _counter(url, "textproc_http_framing_refused_total") >= 1
    # either header alone is fine
    ok = httpx.post(url + "/tokenize", content=body, timeout=10)
    assert ok.status_code == 200


def test_slow_headers_are_cut_off(stack: tuple[Service, str]) -> None:
    url = stack[1]
    before = _counter(url, "textproc_http_header_timeouts_total")
    started = time.monotonic()
    with _connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # and never the end of the headers
        assert _read_all(sock) == b""  # closed by the server
    assert time.monotonic() - started < 4
    # a kept-alive connection gets the same deadline for its next request
    with _connect(url) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_while_trickling(sock), "a slowly sent second request held the connection"
    assert _counter(url, "textproc_http_header_timeouts_total") >= before + 2


def _closed_while_trickling(sock: socket.socket) -> bool:
    """Send the next request's headers a byte every 0.5 s for 4 s (past the 1 s deadline; valid
    bytes, so only the deadline can end it); True once the server closed."""
    for byte in b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: a"[:8]:
        try:
            sock.sendall(bytes([byte]))
            time.sleep(0.5)
            if sock.recv(1, socket.MSG_DONTWAIT) == b"":
                return True
        except BlockingIOError:
            continue
        except OSError:  # EPIPE / ECONNRESET: closed
            return True
    return False


def test_slow_body_gets_408(stack: tuple[Service, str]) -> None:
    url = stack[1]
    with _connect(url) as sock:
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n" + b'{"prompt": ')
        reply = _read_all(sock)
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:300]
    assert "did not arrive within 1 s" in json.loads(payload)["error"]["message"]
    assert _counter(url, "textproc_http_body_timeouts_total") >= 1


def test_connections_past_the_limit_get_503(stack: tuple[Service, str]) -> None:
    url = stack[1]
    before = _counter(url, "textproc_http_connections_refused_total")
    held = [_connect(url) for _ in range(MAX_CONNECTIONS + 4)]
    try:
        time.sleep(0.3)
        refused = []
        for sock in held:
            sock.settimeout(0.2)
            try:
                data = sock.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            if data.startswith(b"HTTP/1.1 503"):
                refused.append(data)
        assert len(refused) >= 4, len(refused)
        assert b"retry-after: 1" in refused[0].lower()
        assert b"too_many_connections" in refused[0]
    finally:
        for sock in held:
            sock.close()
    assert _counter(url, "textproc_http_connections_refused_total") >= before + 4
    deadline = time.monotonic() + 5  # the slots free as the server sees the closes
    while True:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_405_names_the_allowed_methods(stack: tuple[Service, str]) -> None:
    url = stack[1]
    resp = httpx.post(url + "/health", timeout=10)
    assert resp.status_code == 405
    assert set(resp.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    assert "allowed: " in resp.json()["error"]["message"]
    resp = httpx.get(url + "/v1/chat/completions", timeout=10)
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
