"""The HTTP and health ports: ``HOST:PORT`` parsing, the one way textproc binds them, and the
files in the runtime dir through which their processes find each other, and the check that
keeps that directory private.

The supervisor binds each port once and shares the socket with its children (``pass_fds``); a
standalone frontend or health process binds its own. A frontend writes its bound address to
its address file once it serves (the supervisor's ready check) and publishes its state to its
state file (read by the health process). Standard library only.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from textproc.errors import InvalidInput, TextprocError, short

__all__ = ["DEFAULT_HEALTH", "DEFAULT_HTTP", "ENGINE_STATS_FILE", "HTTP_FILE", "LISTEN_BACKLOG", "check_private_dir",
           "frontend_file", "listen", "parse_address", "state_file"]

DEFAULT_HTTP = "127.0.0.1:8000"
DEFAULT_HEALTH = "127.0.0.1:8001"
LISTEN_BACKLOG = 2048
HTTP_FILE = "http.json"  # the API's address once every frontend serves (written by serve)
ENGINE_STATS_FILE = "engine-stats.json"  # several engines' front: each rank's state (for /health)


def frontend_file(index: int) -> str:
    """The address file (``{"host", "port", "pid", "frontend"}``) frontend ``index`` writes
    once it serves."""
    return f"http-{index}.json"


def state_file(index: int) -> str:
    """Where frontend ``index`` publishes its state for the ``--health`` port."""
    return f"http-{index}.health"


def parse_address(text: str, *, flag: str = "--http") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port); port 0 picks a free port.

    >>> parse_address("127.0.0.1:8000")
    ('127.0.0.1', 8000)
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidInput(f"{flag} address {short(text)} is not HOST:PORT, e.g. {DEFAULT_HTTP}")
    return host.strip("[]"), int(port)


def listen(address: str, *, flag: str = "--http") -> socket.socket:
    """A listening TCP socket on ``HOST:PORT``; a taken or bad address is a TextprocError
    ``cannot listen on HOST:PORT (flag): reason``."""
    host, port = parse_address(address, flag=flag)
    try:
        return socket.create_server((host, port), backlog=LISTEN_BACKLOG,
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        raise TextprocError(f"cannot listen on {host}:{port} ({flag}): {e.strerror or e}") from e


def check_private_dir(path: Path) -> None:
    """Make ``path`` mode 0700 and check it is a real directory owned by this user.

    The ipc socket files in it are the service's only access control without CURVE: a
    directory another user owns or can enter would let them connect.
    """
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise InvalidInput(f"runtime dir {path} is not a directory (or is a symlink)")
    if st.st_uid != os.getuid():
        raise InvalidInput(f"runtime dir {path} is owned by uid {st.st_uid}, not by this user "
                           f"({os.getuid()}); use a directory of your own")
    os.chmod(path, 0o700)
    mode = os.lstat(path).st_mode & 0o777
    if mode != 0o700:
        raise InvalidInput(f"runtime dir {path} has mode {mode:04o} after chmod 0700")
