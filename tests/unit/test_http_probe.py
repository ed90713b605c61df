"""``GET /health`` answered on accept (textproc.http.probe, BatchAcceptor's ``answer``).

A busy frontend's event loop runs iterations of 10-50 ms; a probe that went through uvicorn
waited three or four of them. Answered where it is accepted, it waits for one."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httptools
import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from textproc.http.accept import BatchAcceptor
from textproc.http.probe import http_reply, is_health_request, reply

pytestmark = pytest.mark.timeout(60)

OK = b'{"status":"ok"}'


@pytest.mark.parametrize("head, head_only", [
    (b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", False),
    (b"GET /health HTTP/1.0\r\n\r\n", False),
    (b"GET /health?probe=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: kube-probe/1.31\r\n\r\n", False),
    (b"HEAD /health HTTP/1.1\r\nhost: x\r\n\r\n", True),
])
def test_a_lone_health_head_is_answered(head: bytes, head_only: bool) -> None:
    assert is_health_request(head) == (True, head_only)


@pytest.mark.parametrize("data", [
    b"",
    b"GET /health HTTP/1.1\r\nhost: x\r\n",  # the head is not complete yet
    b"GET /health HTTP/1.1\r\nhost: x\r\n\r\nGET /health HTTP/1.1\r\n\r\n",  # pipelined
    b"POST /health HTTP/1.1\r\nhost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\n\r\n",
    b"GET /health HTTP/2.0\r\n\r\n",
    b"GET /health HTTP/1.1 extra\r\n\r\n",
    b"GET  /health HTTP/1.1\r\n\r\n",
    b"GET /health HTTP/1.1\r\ncontent-length: 3\r\n\r\n",  # a body follows
    b"GET /health HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /health HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET /health HTTP/1.1\r\nhost : x\r\n\r\n",  # whitespace before the colon: uvicorn's 400
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
])
def test_anything_else_goes_to_uvicorn(data: bytes) -> None:
    assert is_health_request(data) == (False, False)
    assert reply(data, lambda: (200, OK)) is None


def test_the_reply_is_a_whole_closing_json_answer() -> None:
    whole = http_reply(503, b'{"status":"unavailable"}', headers=[("x-textproc-frontend", "1")])
    head, _, body = whole.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 503 Service Unavailable"
    assert b"content-length: 24" in lines and b"connection: close" in lines
    assert b"content-type: application/json" in lines and b"x-textproc-frontend: 1" in lines
    assert body == b'{"status":"unavailable"}'
    only_head = http_reply(200, OK, head_only=True)
    assert only_head.endswith(b"\r\n\r\n") and b"content-length: 15" in only_head


class _Made(asyncio.Protocol):
    made: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        _Made.made.append(data)
        self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nuv")
        self.transport.close()


def _send(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    if data:
        s.sendall(data)
    return s


def _read_all(s: socket.socket) -> bytes:
    s.settimeout(5)
    chunks = []
    while chunk := s.recv(65536):  # a reset (unread bytes at close) would raise here
        chunks.append(chunk)
    s.close()
    return b"".join(chunks)


def test_the_acceptor_answers_a_probe_on_accept_and_hands_over_the_rest() -> None:
    """The probe is answered in the iteration that accepts it (no protocol is made for it) and
    gets its whole answer, then a clean end of stream; a request for another path, and a
    connection that has sent nothing yet, go to the protocol as before."""
    asked: list[int] = []

    def answer() -> tuple[int, bytes]:
        asked.append(1)
        return 200, OK

    async def main() -> tuple[list[bytes], int, int, int]:
        _Made.made = []
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        port = listener.getsockname()[1]
        acceptor = BatchAcceptor(loop, listener, _Made,
                                 answer=lambda data: reply(data, answer, [("x-f", "0")]))
        probe = _send(port, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        other = _send(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        silent = _send(port, b"")
        time.sleep(0.05)  # all three wait in the accept queue, their bytes in their buffers
        acceptor._accept()  # one readiness
        answered_in_accept = acceptor.answered
        got = await loop.run_in_executor(None, _read_all, probe)
        other_got = await loop.run_in_executor(None, _read_all, other)
        silent.sendall(b"GET /health HTTP/1.1\r\n\r\n")  # after its hand-over: uvicorn's
        silent_got = await loop.run_in_executor(None, _read_all, silent)
        acceptor.close()
        listener.close()
        assert other_got.endswith(b"uv") and silent_got.endswith(b"uv")
        return [got], answered_in_accept, acceptor.answered, len(_Made.made)

    (got,), in_accept, answered, made = uvloop.run(main())
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"x-f: 0" in head and body == OK
    assert in_accept == 1 and answered == 1 and asked == [1]
    assert made == 2  # the other request and the silent connection were handed over


class _Parsed:
    def __init__(self) -> None:
        self.url = b""
        self.complete = False
        self.body = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


_NAMES = st.sampled_from([b"host", b"Host", b"user-agent", b"accept", b"connection",
                          b"content-length", b"transfer-encoding", b"x-a", b"ho(st", b"",
                          b" host", b"host ", b"ex pect", b"expect", b"upgrade", b"x\x00"])
_VALUES = st.sampled_from([b"x", b" close", b"0", b"chunked", b"\t1", b"a\x00b", b"\x7f",
                           b"caf\xc3\xa9", b"x\ry"]) | st.binary(max_size=8)
_LINES = st.tuples(_NAMES, st.sampled_from([b": ", b": ", b":", b"", b" :"]), _VALUES).map(b"".join)


@settings(max_examples=1000, deadline=None)
@given(method=st.sampled_from([b"GET", b"GET", b"HEAD", b"POST", b"get"]),
       target=st.sampled_from([b"/health", b"/health", b"/health?x=1", b"/health#x",
                               b"/healthz", b"/hea%6Cth", b"http://h/health"]),
       version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0"]),
       lines=st.lists(_LINES, max_size=3),
       tail=st.sampled_from([b"", b"", b"", b"x", b"GET / HTTP/1.1\r\n\r\n"]))
def test_only_what_llhttp_parses_as_a_lone_bodiless_health_request_is_answered(
        method: bytes, target: bytes, version: bytes, lines: list[bytes], tail: bytes) -> None:
    """Differential against uvicorn's parser (httptools = llhttp): whenever the probe path
    answers, llhttp takes the same bytes as one whole GET/HEAD of /health, no body, nothing
    after it; so a probe never gets a 200 where uvicorn would have answered 400."""
    data = b"\r\n".join([b" ".join([method, target, version]), *lines]) + b"\r\n\r\n" + tail
    ok, head_only = is_health_request(data)
    if not ok:
        return
    parsed = _Parsed()
    parser = httptools.HttpRequestParser(parsed)
    parser.feed_data(data)  # raises HttpParserError on what llhttp refuses
    assert parsed.complete and parsed.body == b""
    assert parser.get_method() in (b"GET", b"HEAD") and head_only == (parser.get_method() == b"HEAD")
    assert httptools.parse_url(parsed.url).path == b"/health"
    assert parser.should_upgrade() is False


def test_an_answer_that_raises_hands_the_connection_over() -> None:
    """A bug in the on-accept answer costs that one fast path, never the connection or the
    acceptor: the request goes to uvicorn's protocol as if there were no fast path."""
    def broken(data: bytes) -> bytes | None:
        raise RuntimeError("bug")

    async def main() -> tuple[bytes, int, int]:
        _Made.made = []
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=16)
        acceptor = BatchAcceptor(loop, listener, _Made, answer=broken)
        probe = _send(listener.getsockname()[1], b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        time.sleep(0.05)
        acceptor._accept()
        got = await loop.run_in_executor(None, _read_all, probe)
        acceptor.close()
        listener.close()
        return got, acceptor.answered, len(_Made.made)

    got, answered, made = uvloop.run(main())
    assert got.endswith(b"uv") and answered == 0 and made == 1
