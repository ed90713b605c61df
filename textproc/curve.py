"""ZeroMQ CURVE for textproc's sockets: key files, socket options and the ZAP allow-list.

Owns key files (``write_curve_keys`` for ``textproc keys``; ``load_keypair`` /
``load_public_key`` read ZeroMQ certificate files or plain z85), ``apply_curve_server`` /
``apply_curve_client`` (socket options, set before bind/connect) and ``start_authenticator``
(a ZAP handler per binding process that admits only allow-listed client public keys). Every
binding process of a service started with CURVE keys makes every socket it binds a CURVE
server; every connecting socket (children, ``TextClient``, ``EngineLink``) is a CURVE client
holding a key pair whose public key is on the allow-list.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.utils.z85

from textproc.errors import InvalidInput, short

__all__ = [
    "CurveServerKeys",
    "CurveClientKeys",
    "CURVE_FILES",
    "write_curve_keys",
    "load_keypair",
    "load_public_key",
    "load_server_keys",
    "load_client_keys",
    "apply_curve_server",
    "apply_curve_client",
    "start_authenticator",
]

_log = logging.getLogger("textproc.transport")
_LOG_FIRST_N = 20  # refused peers logged in full, then every _LOG_EVERY-th
_LOG_EVERY = 1000

# file names inside a key directory made by ``textproc keys``
CURVE_FILES = {
    "server_public": "server.key",  # give to clients and engines (public)
    "server_secret": "server.key_secret",  # the service's key pair (keep on the service host)
    "client_public": "client.key",  # public key of the client key pair
    "client_secret": "client.key_secret",  # give to clients and engines (their key pair)
    "authorized": "authorized_clients",  # directory: one public key file per allowed client
}
_Z85_KEY_LEN = 40
_ZAP_DOMAIN = "textproc"  # set on every CURVE server socket; the ZAP handler serves this domain


@dataclass(frozen=True)
class CurveServerKeys:
    """What a binding process needs: its key pair and the client public keys it admits (z85)."""

    public: bytes
    secret: bytes
    authorized: frozenset[bytes]

    def as_client(self) -> CurveClientKeys:
        """The same key pair as a client of this server (textproc's processes among themselves)."""
        return CurveClientKeys(self.public, self.secret, self.public)


@dataclass(frozen=True)
class CurveClientKeys:
    """What a connecting socket needs: its own key pair and the server's public key (z85)."""

    public: bytes
    secret: bytes
    server_public: bytes


def _write_private(path: Path, text: str, *, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _cert_text(public: bytes, secret: bytes | None) -> str:
    """ZeroMQ's certificate format (ZPL), readable by ``zmq.auth.load_certificate`` and czmq."""
    lines = ["#   ZeroMQ CURVE " + ("Secret" if secret else "Public") + " Certificate",
             "#   Made by textproc keys" + ("; keep it private" if secret else ""),
             "", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def write_curve_keys(directory: str | os.PathLike[str], *, overwrite: bool = False) -> dict[str, Path]:
    """Make a server and a client key pair (``zmq.curve_keypair``) in ``directory``.

    Files (mode 0600, directory 0700) in ZeroMQ's certificate format: ``server.key`` /
    ``server.key_secret``, ``client.key`` / ``client.key_secret`` and ``authorized_clients/
    client.key``. Refuses to overwrite existing keys unless ``overwrite``.
    """
    base = Path(directory)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(base, 0o700)
    auth = base / CURVE_FILES["authorized"]
    auth.mkdir(exist_ok=True, mode=0o700)
    os.chmod(auth, 0o700)
    paths = {name: base / CURVE_FILES[name] for name in
             ("server_public", "server_secret", "client_public", "client_secret")}
    paths["authorized_client"] = auth / CURVE_FILES["client_public"]
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not overwrite:
        raise InvalidInput(f"CURVE key files already exist: {short(existing, 300)}; "
                           "remove them or choose another directory")
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    _write_private(paths["server_public"], _cert_text(server_public, None), mode=0o600)
    _write_private(paths["server_secret"], _cert_text(server_public, server_secret), mode=0o600)
    _write_private(paths["client_public"], _cert_text(client_public, None), mode=0o600)
    _write_private(paths["client_secret"], _cert_text(client_public, client_secret), mode=0o600)
    _write_private(paths["authorized_client"], _cert_text(client_public, None), mode=0o600)
    return paths


def _check_z85(key: bytes, what: str, path: Path) -> bytes:
    if len(key) != _Z85_KEY_LEN:
        raise InvalidInput(f"{what} in {path} must be a {_Z85_KEY_LEN}-character z85 key, got "
                           f"{len(key)} characters")
    try:
        zmq.utils.z85.decode(key)
    except (ValueError, KeyError, IndexError) as e:
        raise InvalidInput(f"{what} in {path} is not z85: {short(key)}") from e
    return key


def _read_key_file(path: Path) -> tuple[bytes | None, bytes | None]:
    """(public, secret) from a ZeroMQ certificate file, or a plain z85 file (public, then
    optionally secret, one key per line)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InvalidInput(f"cannot read CURVE key file {path}: {e.strerror}") from e
    if b"public-key" in raw:
        # here: zmq.auth costs ~30 ms to import, paid only with a certificate file
        from zmq.auth.certs import load_certificate

        try:
            public, secret = load_certificate(path)
        except ValueError as e:
            raise InvalidInput(f"CURVE key file {path}: {e}") from e
        return public, secret
    keys = [line.strip() for line in raw.splitlines() if line.strip() and not line.startswith(b"#")]
    if not 1 <= len(keys) <= 2:
        raise InvalidInput(f"CURVE key file {path} must be a ZeroMQ certificate or 1-2 z85 keys "
                           f"(public, then secret), one per line; found {len(keys)} lines")
    return keys[0], keys[1] if len(keys) == 2 else None


def load_keypair(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) z85 from a ``*.key_secret`` file; refuses a file others can read."""
    p = Path(path)
    public, secret = _read_key_file(p)
    if secret is None or public is None:
        raise InvalidInput(f"CURVE key file {p} holds no secret key; give the *.key_secret file")
    mode = p.stat().st_mode & 0o777
    if mode & 0o077:
        raise InvalidInput(f"CURVE secret key file {p} has mode {mode:04o}; it must not be "
                           "readable by group or others (chmod 600)")
    _check_z85(public, "public key", p)
    _check_z85(secret, "secret key", p)
    if zmq.curve_public(secret) != public:
        raise InvalidInput(f"CURVE key file {p}: the public key does not belong to the secret key")
    return public, secret


def load_public_key(path: str | os.PathLike[str]) -> bytes:
    p = Path(path)
    public, _ = _read_key_file(p)
    if public is None:
        raise InvalidInput(f"CURVE key file {p} holds no public key")
    return _check_z85(public, "public key", p)


def load_server_keys(directory: str | os.PathLike[str]) -> CurveServerKeys:
    """The service side of a key directory: its key pair and the allow-listed client keys.

    The allow-list is every key file in ``authorized_clients/`` plus the server's own public key
    (textproc's processes connect to each other with the server key pair).
    """
    base = Path(directory)
    public, secret = load_keypair(base / CURVE_FILES["server_secret"])
    auth = base / CURVE_FILES["authorized"]
    allowed = {public}
    if auth.is_dir():
        for f in sorted(auth.iterdir()):
            if f.is_file() and not f.name.startswith("."):
                allowed.add(load_public_key(f))
    return CurveServerKeys(public, secret, frozenset(allowed))


def load_client_keys(*, client_secret_file: str | os.PathLike[str],
                     server_public_file: str | os.PathLike[str] | None = None,
                     server_public: bytes | None = None) -> CurveClientKeys:
    """A client's keys: its ``*.key_secret`` file and the server's public key (file or z85)."""
    public, secret = load_keypair(client_secret_file)
    if server_public_file is not None:
        server_public = load_public_key(server_public_file)
    if server_public is None:
        raise InvalidInput("a CURVE client needs the server's public key (server.key)")
    return CurveClientKeys(public, secret, server_public)


def apply_curve_server(sock: zmq.Socket[Any], keys: CurveServerKeys) -> None:
    """Make ``sock`` a CURVE server (before ``bind``); admission is the ZAP handler's job."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, _ZAP_DOMAIN.encode())


def apply_curve_client(sock: zmq.Socket[Any], keys: CurveClientKeys) -> None:
    """Make ``sock`` a CURVE client of the server ``keys.server_public`` (before ``connect``)."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)


class _AllowList:
    def __init__(self, allowed: frozenset[bytes]) -> None:
        self.allowed = allowed
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        z85 = zmq.utils.z85.encode(key) if len(key) == 32 else key
        if z85 in self.allowed:
            return True
        self.refused += 1
        if self.refused <= _LOG_FIRST_N or self.refused % _LOG_EVERY == 0:
            _log.warning("CURVE: refused a peer with unknown public key %s (#%d)",
                         z85.decode(errors="replace"), self.refused)
        return False


def start_authenticator(ctx: zmq.Context[Any], keys: CurveServerKeys) -> Any:
    """Start a ZAP handler thread on ``ctx`` that admits only ``keys.authorized`` client keys.

    Returns the ``ThreadAuthenticator``; call ``.stop()`` before terminating the context.
    """
    # here: zmq.auth.thread costs ~40 ms to import, paid only by a service with CURVE keys
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx, log=logging.getLogger("textproc.zap"))
    auth.start()
    auth.configure_curve_callback(domain=_ZAP_DOMAIN, credentials_provider=_AllowList(keys.authorized))
    return auth
