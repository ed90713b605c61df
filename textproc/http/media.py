"""Image sources of a chat request -> their bytes: ``data:`` URLs decoded, ``http(s)`` URLs fetched.

Owns what a client may make the frontend fetch: at most ``MediaLimits.max_images`` images a
request, each at most ``max_image_bytes``, all at most ``max_total_bytes``; a URL only over http or https, to a host in
``allowed_domains`` when that list is set, and never to a private, loopback, link-local or
otherwise non-global address unless ``allow_private`` (the address is checked after the name
resolves, and the connection goes to that checked address, so a name that resolves twice
cannot swap in a private one); redirects are followed (at most ``MAX_REDIRECTS``) with the
same checks; the whole fetch, redirects included, ends by ``fetch_timeout_s``. Every refusal,
a timeout included, is a 400 :class:`ApiError` whose ``param`` is the image's place in the body
(``messages[0].content[1]``). Decoding the image is the tokenizer worker's
(``textproc.vision``): this module never looks inside the bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Sequence

from textproc.errors import short
from textproc.http.api_types import ApiError, ImageInput

__all__ = ["MediaLimits", "load_images", "MAX_REDIRECTS"]

MAX_REDIRECTS = 3
_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class MediaLimits:
    """What loading a request's images may cost (``HttpLimits`` carries them as flags)."""

    max_images: int = 16
    max_image_bytes: int = 16 * 1024 * 1024
    # all of a request's images: they travel to the worker in one frame (64 MiB by default)
    max_total_bytes: int = 48 * 1024 * 1024
    fetch_timeout_s: float = 5.0
    allowed_domains: tuple[str, ...] = ()  # empty: any host with a global address
    allow_private: bool = False


async def load_images(images: Sequence[ImageInput], limits: MediaLimits) -> None:
    """Fill each image's ``data``: decode its ``data:`` URL, or fetch its http(s) URL (all
    fetches of a request at once, each in a thread, each ending by ``fetch_timeout_s``).
    Raises ApiError naming the first image that failed."""
    if len(images) > limits.max_images:
        raise ApiError(f"the request has {len(images)} images, over the limit of "
                       f"{limits.max_images} per prompt (--limit-mm-per-prompt); the first one "
                       f"over is {images[limits.max_images].param}",
                       param=images[limits.max_images].param)
    fetches: list[ImageInput] = []
    for image in images:
        if image.url.startswith("data:"):
            image.data = _data_url(image.url, image.param, limits.max_image_bytes)
        else:
            fetches.append(image)
    results = await asyncio.gather(*(_fetch(image, limits) for image in fetches),
                                   return_exceptions=True) if fetches else []
    for image, result in zip(fetches, results):
        if isinstance(result, BaseException):
            raise result
        image.data = result
    total = 0
    for image in images:
        total += len(image.data)
        if total > limits.max_total_bytes:
            raise ApiError(f"the request's images come to {total} bytes with {image.param}, "
                           f"over the limit of {limits.max_total_bytes} bytes per request",
                           param=image.param)


def _data_url(url: str, param: str, max_bytes: int) -> bytes:
    """``data:[<media type>][;base64],<data>``: the bytes, for base64 image data only."""
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64"):
        raise ApiError(f"{param} holds a data: URL {short(url)} that is not base64 data; send "
                       "data:image/<type>;base64,<data>", param=param)
    media_type = head[5:-7].split(";")[0].strip().lower()
    if media_type and not media_type.startswith("image/"):
        raise ApiError(f"{param} holds a data: URL of type {short(media_type)}; only images "
                       "(image/...) are read; audio, video and files are not supported",
                       param=param)
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise ApiError(f"{param} is an image of about {len(payload) * 3 // 4} bytes, over the "
                       f"limit of {max_bytes} bytes", param=param)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ApiError(f"{param} holds a data: URL whose base64 data does not decode ({e})",
                       param=param) from e


async def _fetch(image: ImageInput, limits: MediaLimits) -> bytes:
    # the thread is bounded too: every socket operation times out, and the read loop checks
    # the deadline, so a dripping server cannot keep it past fetch_timeout_s + one operation
    deadline = time.monotonic() + limits.fetch_timeout_s
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(_fetch_blocking, image.url, image.param, limits, deadline),
            timeout=limits.fetch_timeout_s)
    except (asyncio.TimeoutError, TimeoutError, socket.timeout) as e:
        raise ApiError(f"{image.param}: fetching {short(image.url)} did not finish within "
                       f"{limits.fetch_timeout_s:g} s", param=image.param) from e


def _fetch_blocking(url: str, param: str, limits: MediaLimits, deadline: float) -> bytes:
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ApiError(f"{param} has URL {short(url)}; images come as data: URLs or "
                           "http(s) URLs", param=param)
        host = parts.hostname.lower()
        if limits.allowed_domains and host not in limits.allowed_domains:
            raise ApiError(f"{param} has URL {short(url)} whose host {host!r} is not in the "
                           f"allowed media domains {list(limits.allowed_domains)}", param=param)
        address = _checked_address(host, parts.port, parts.scheme, param, limits, deadline)
        timeout = max(0.001, deadline - time.monotonic())
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = _PinnedHTTPS(host, address, parts.port or 443, timeout)
        else:
            conn = http.client.HTTPConnection(address, parts.port or 80, timeout=timeout)
        response: http.client.HTTPResponse | None = None
        try:
            path = parts.path or "/"
            conn.request("GET", path + (f"?{parts.query}" if parts.query else ""),
                         headers={"Host": parts.netloc.rpartition("@")[2],
                                  "Accept": "image/*", "User-Agent": "textproc"})
            response = conn.getresponse()
            if response.status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                if not location:
                    raise ApiError(f"{param}: {short(url)} redirected nowhere", param=param)
                url = urllib.parse.urljoin(url, location)
                continue
            if response.status != 200:
                raise ApiError(f"{param}: fetching {short(url)} got HTTP {response.status}",
                               param=param)
            return _read_capped(response, url, param, limits.max_image_bytes, deadline)
        except OSError as e:
            if isinstance(e, (TimeoutError, socket.timeout)):
                raise
            raise ApiError(f"{param}: fetching {short(url)} failed ({e})", param=param) from e
        except http.client.HTTPException as e:
            raise ApiError(f"{param}: fetching {short(url)} failed ({type(e).__name__})",
                           param=param) from e
        finally:
            if response is not None:
                response.close()
            conn.close()
    raise ApiError(f"{param}: {short(url)} redirected more than {MAX_REDIRECTS} times",
                   param=param)


def _checked_address(host: str, port: int | None, scheme: str, param: str,
                     limits: MediaLimits, deadline: float) -> str:
    """The address to connect to: the host's, refused when not global (unless allowed)."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port or (443 if scheme == "https" else 80),
                                       type=socket.SOCK_STREAM)
        except OSError as e:
            raise ApiError(f"{param}: the image host {host!r} does not resolve ({e})",
                           param=param) from e
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if time.monotonic() > deadline:
        raise TimeoutError(f"resolving {host}")
    if not limits.allow_private:
        bad = [str(a) for a in addresses if not a.is_global]
        if bad:
            raise ApiError(f"{param}: the image host {host!r} is at a private or local address "
                           f"({bad[0]}); such addresses are refused", param=param)
    return str(addresses[0])


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a checked address, with the host's name for SNI and the certificate."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _read_capped(response: http.client.HTTPResponse, url: str, param: str, max_bytes: int,
                 deadline: float) -> bytes:
    length = response.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise ApiError(f"{param}: {short(url)} is {length} bytes, over the limit of "
                       f"{max_bytes} bytes", param=param)
    chunks, total = [], 0
    while chunk := response.read(_CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise ApiError(f"{param}: {short(url)} is over the limit of {max_bytes} bytes",
                           param=param)
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {url}")
        chunks.append(chunk)
    return b"".join(chunks)
