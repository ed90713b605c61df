"""Fetching image URLs (``textproc.http.media``) from local servers: the bytes, the size cap,
the timeout (a server that never answers), redirects, private addresses refused by default,
the allowed-domains list; each refusal a 400 naming the part."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from textproc.http.api_types import ApiError, ImageInput
from textproc.http.media import MediaLimits, load_images

pytestmark = pytest.mark.timeout(30)
BODY = b"\x89PNG fake image bytes" * 100


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/img.png":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)
        elif self.path == "/chunked":  # no Content-Length: the cap counts what arrives
            self.send_response(200)
            self.end_headers()
            for _ in range(50):
                self.wfile.write(BODY)
        elif self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", self.path[3:])
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/never.png"
    sock.close()


def _load(urls: list[str], **limits: Any) -> list[ImageInput]:
    images = [ImageInput(param=f"messages[0].content[{i}]", url=u) for i, u in enumerate(urls)]
    asyncio.run(load_images(images, MediaLimits(**limits)))
    return images


def _refused(urls: list[str], **limits: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        _load(urls, **limits)
    assert info.value.status == 400
    assert info.value.param == f"messages[0].content[{len(urls) - 1}]"
    return info.value


def test_fetch_and_redirect(server: str) -> None:
    images = _load([f"{server}/img.png", f"{server}/to/img.png"], allow_private=True)
    assert [i.data for i in images] == [BODY, BODY]


def test_private_addresses_refused_by_default(server: str) -> None:
    assert "private or local address (127.0.0.1)" in _refused([f"{server}/img.png"]).message
    port = server.rsplit(":", 1)[1]
    assert "localhost" in _refused([f"http://localhost:{port}/img.png"]).message
    for url in ("http://10.1.2.3/a.png", "http://169.254.169.254/latest/meta-data",
                "http://[::1]/a.png"):
        assert "such addresses are refused" in _refused([url]).message


def test_allowed_domains(server: str) -> None:
    err = _refused([f"{server}/img.png"], allow_private=True, allowed_domains=("example.com",))
    assert "not in the allowed media domains" in err.message
    _load([f"{server}/img.png"], allow_private=True, allowed_domains=("127.0.0.1",))


def test_caps(server: str) -> None:
    assert "over the limit of 1000 bytes" in _refused(
        [f"{server}/img.png"], allow_private=True, max_image_bytes=1000).message
    assert "over the limit of 5000 bytes" in _refused(
        [f"{server}/chunked"], allow_private=True, max_image_bytes=5000).message
    assert "HTTP 404" in _refused([f"{server}/missing.png"], allow_private=True).message
    assert "redirected more than" in _refused([f"{server}/loop"], allow_private=True).message


def test_a_url_that_never_answers_ends_by_the_timeout(silent: str) -> None:
    started = time.monotonic()
    err = _refused([silent], allow_private=True, fetch_timeout_s=0.5)
    assert "did not finish within 0.5 s" in err.message
    assert time.monotonic() - started < 2.0
