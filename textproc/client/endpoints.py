"""What a TextClient reads from a service's ``endpoints.json``: the file, its protocol, its CURVE keys.

The service writes ``endpoints.json`` into its runtime directory once it serves; a client waits
for it (never forever), refuses a service that speaks another ``PROTOCOL_VERSION`` and finds
the CURVE key pair the file names. It opens no socket (``TextClient.start`` does).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from textproc.curve import CurveClientKeys, load_client_keys
from textproc.errors import InvalidInput, ProtocolError, StartupTimeout, short
from textproc.protocol import PROTOCOL_VERSION

__all__ = ["client_curve", "read_endpoints"]


async def read_endpoints(runtime_dir: str | os.PathLike[str], *, deadline: float,
                         timeout_s: float) -> tuple[Path, dict[str, Any]]:
    """``runtime_dir``'s ``endpoints.json`` and its JSON object once the file exists.

    StartupTimeout at ``deadline`` (``time.monotonic()``, ``timeout_s`` after the wait began);
    ProtocolError when the file is not JSON or names another protocol version.
    """
    path = Path(runtime_dir) / "endpoints.json"
    while not path.is_file():
        if time.monotonic() >= deadline:
            raise StartupTimeout(
                f"waited {timeout_s:.1f} s for {path}; is `textproc serve --runtime-dir "
                f"{runtime_dir}` running?")
        await asyncio.sleep(0.05)
    try:
        info = json.loads(path.read_text())
    except ValueError as e:
        raise ProtocolError(f"{path} is not JSON: {e}") from e
    if not isinstance(info, dict) or info.get("protocol_version") != PROTOCOL_VERSION:
        got = info.get("protocol_version") if isinstance(info, dict) else short(info)
        raise ProtocolError(f"{path}: service speaks protocol {got!r}, this client "
                            f"{PROTOCOL_VERSION}; upgrade the older side")
    return path, info


def client_curve(info: dict[str, Any], path: Path, client_key: str | os.PathLike[str] | None,
                 server_key: str | os.PathLike[str] | None) -> CurveClientKeys | None:
    """The CURVE keys for a service described by ``info`` (None when it runs without CURVE)."""
    curve = info.get("curve")
    if curve is None and client_key is None:
        return None
    if curve is not None and not isinstance(curve, dict):
        raise ProtocolError(f"{path}: 'curve' must be an object, got {short(curve)}")
    curve = curve or {}
    client_key = client_key if client_key is not None else curve.get("client_key_file")
    if client_key is None:
        raise InvalidInput(f"the service in {path.parent} uses CURVE: pass curve_client_key (a "
                           "*.key_secret file made by `textproc keys`)")
    server_public = curve.get("server_public_key")
    return load_client_keys(
        client_secret_file=client_key, server_public_file=server_key,
        server_public=server_public.encode() if isinstance(server_public, str) else None)
