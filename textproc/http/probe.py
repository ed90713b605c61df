"""``GET /health`` answered where the connection is accepted, before the event loop's queue.

A busy frontend (500 streams at full engine speed, ``bench/crowd.py``) runs event-loop
iterations of 10-50 ms. A probe on a new connection went through three or four of them (the
hand-over to uvicorn, the read of its request, the handler, the write): API-port ``/health``
p99 65-160 ms. A load balancer's probe opens a new connection and sends its whole request at
once, so when :class:`textproc.http.accept.BatchAcceptor` takes a connection whose first bytes
(peeked, not read) are exactly one complete ``GET``/``HEAD /health`` request head with no body,
it answers it on the spot from the same state as the route (:func:`reply`) and closes the
connection; anything else (another path, a partial head, a body, a pipelined second request,
no bytes yet) goes to uvicorn untouched.

:func:`http_reply` formats a whole ``Connection: close`` answer; the ``--health`` port's
process (``textproc.http.health``) answers with it too.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Callable, Sequence

__all__ = ["PEEK_BYTES", "is_health_request", "http_reply", "reply"]

PEEK_BYTES = 2048  # a probe's whole request head fits (curl, kubelet, ALB: ~100-200 bytes)
_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}
_BODY_HEADERS = (b"content-length", b"transfer-encoding", b"expect", b"upgrade")
# a header line as llhttp takes it: an RFC 9110 token, a colon, a value without control bytes
_HEADER = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*")


def is_health_request(data: bytes) -> tuple[bool, bool]:
    """(is a lone complete ``GET``/``HEAD /health`` head, is ``HEAD``) for the first bytes of a
    connection. False for anything uvicorn should see: another method or path, an HTTP version
    other than 1.0/1.1, a head not complete in ``data``, bytes after it, a header line that is
    not a token, a colon and a value without control bytes (what llhttp refuses), or one that
    announces a body or a protocol switch."""
    end = data.find(b"\r\n\r\n")
    if end < 0 or end + 4 != len(data):
        return False, False
    lines = data[:end].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return False, False
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD") or target.split(b"?", 1)[0] != b"/health":
        return False, False
    for line in lines[1:]:
        if _HEADER.fullmatch(line) is None or line.partition(b":")[0].lower() in _BODY_HEADERS:
            return False, False
    return True, method == b"HEAD"


def http_reply(status: int, body: bytes, *, head_only: bool = False,
               headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A whole HTTP/1.1 JSON answer that closes the connection (no body for ``HEAD``)."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
             f"date: {email.utils.formatdate(usegmt=True)}",
             "content-type: application/json", f"content-length: {len(body)}",
             "cache-control: no-store", "connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body)


def reply(data: bytes, answer: Callable[[], tuple[int, bytes]],
          headers: Sequence[tuple[str, str]] = ()) -> bytes | None:
    """The whole answer to ``data`` when it is a lone ``/health`` request (``answer`` gives
    its status and JSON body, as the route would), else None."""
    ok, head_only = is_health_request(data)
    if not ok:
        return None
    status, body = answer()
    return http_reply(status, body, head_only=head_only, headers=headers)
