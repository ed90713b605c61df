"""The one child-process bootstrap: what every textproc child does before and after serving.

Owns, for the tokenizer worker and the detokenizer process alike: logging and signals, the
parent watch, loading the model's tokenizer, freezing the long-lived heap out of the garbage
collector, the ZeroMQ context with CURVE/ZAP when the service has keys, sockets that bind
(CURVE servers) or connect (CURVE clients) with the service's frame-size and HWM settings,
Ready to the supervisor, and teardown (every socket closed with linger 0, ZAP stopped, context
terminated) whatever way the serve loop ends. It knows no frame beyond ``Ready``.
"""

from __future__ import annotations

import logging
import os
import signal
from types import TracebackType
from typing import Any

import zmq

from textproc.config import ServiceConfig
from textproc.core.tokenizer import Tokenizer
from textproc.curve import CurveServerKeys, load_server_keys, start_authenticator
from textproc.lifecycle import ParentWatch, setup_logging
from textproc.protocol import Ready
from textproc.transport import close_sockets, encoder, make_socket, new_context

__all__ = ["ChildRuntime"]

_log = logging.getLogger("textproc.bootstrap")


class ChildRuntime:
    """What every child process entry shares: logging, signals, parent watch, sockets, Ready.

    SIGINT is ignored (Ctrl-C reaches the whole process group; the supervisor then stops its
    children in order); SIGTERM sets ``should_stop``. ``parent_alive()`` is False once the
    supervisor that started this process is gone, so no child outlives it for long. Use as a
    context manager around the serve loop: ``with runtime:`` opens the ZeroMQ context, and on
    exit closes every socket made by ``bind`` / ``connect``.
    """

    def __init__(self, *, role: str, index: int, config: ServiceConfig, parent_pid: int) -> None:
        self.role = role
        self.index = index
        self.config = config
        self.parent_pid = parent_pid
        self._parent = ParentWatch(parent_pid)
        self.should_stop = False
        self._ctx: zmq.Context[Any] | None = None
        self._keys: CurveServerKeys | None = None
        self._auth: Any = None
        self._sockets: list[zmq.Socket[Any]] = []

    def start(self) -> None:
        """Logging and signal handlers; call first in the child's entry function."""
        setup_logging(f"{self.role}-{self.index}", self.config.log_level)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: object) -> None:
        self.should_stop = True

    def parent_alive(self) -> bool:
        return self._parent.alive()

    def load_tokenizer(self) -> Tokenizer:
        """The service's tokenizer (``config.model_dir``), every lazy table built before Ready."""
        tokenizer = Tokenizer.from_dir(self.config.model_dir)
        # build the lazy BPE merge table now, not on the first request (0.3-1 s on Qwen)
        tokenizer.validate()
        return tokenizer

    # -- sockets ------------------------------------------------------------------------------

    def __enter__(self) -> ChildRuntime:
        self._ctx = new_context()
        if self.config.curve_dir:
            self._keys = load_server_keys(self.config.curve_dir)
            self._auth = start_authenticator(self._ctx, self._keys)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _socket(self, kind: int, *, server: bool) -> zmq.Socket[Any]:
        if self._ctx is None:
            raise RuntimeError(f"{self.role}-{self.index}: sockets are made inside `with runtime:`")
        keys = self._keys
        sock = make_socket(self._ctx, kind, max_frame_bytes=self.config.max_frame_bytes,
                           hwm=self.config.hwm, curve_server=keys if server else None,
                           curve_client=keys.as_client() if keys is not None and not server else None)
        self._sockets.append(sock)
        return sock

    def bind(self, kind: int, address: str) -> zmq.Socket[Any]:
        """A socket of ``kind`` bound to ``address`` (a CURVE server when the service has keys)."""
        sock = self._socket(kind, server=True)
        sock.bind(address)
        return sock

    def connect(self, kind: int, address: str, *,
                options: dict[int, int | bytes] | None = None) -> zmq.Socket[Any]:
        """A socket of ``kind`` connected to ``address`` (a CURVE client when the service has
        keys); ``options`` (zmq option -> value) are set before connecting."""
        sock = self._socket(kind, server=False)
        for option, value in (options or {}).items():
            sock.setsockopt(option, value)
        sock.connect(address)
        return sock

    def send_ready(self, control: zmq.Socket[Any], *, role: str | None = None, pid: int | None = None) -> None:
        """Tell the supervisor (PUSH connected to its ``control`` PULL) that ``role`` serves now."""
        frame = Ready(role or self.role, self.index, os.getpid() if pid is None else pid)
        try:
            control.send(encoder().encode(frame), flags=zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("control socket full; Ready(%s) not sent", frame.role)

    def close(self) -> None:
        """Close every socket (linger 0), stop ZAP, terminate the context; safe to call twice."""
        close_sockets(self._sockets)
        self._sockets.clear()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            close_sockets([], self._ctx)
            self._ctx = None
