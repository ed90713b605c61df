"""ZeroMQ sockets and frame decoding for every textproc process: options, typed decoders, counters.

Owns how a socket is made (linger 0, high-water marks, ZMQ_MAXMSGSIZE on receive, ROUTER_MANDATORY,
short reconnect intervals) and how a received frame becomes a typed struct. A frame that does not
decode is counted per socket and logged with the socket name and peer, never raised: one bad peer
must not take a process down. Does not know what the frames mean (workers, the detokenizer and the
client do) and never pickles anything.

Also owns ZeroMQ CURVE (issue 7): key files (``write_curve_keys`` for ``textproc keys``,
``load_keypair`` / ``load_public_key`` read ZeroMQ certificate files or plain z85),
``apply_curve_server`` / ``apply_curve_client`` (socket options, set before bind/connect) and
``start_authenticator`` (a ZAP handler per binding process that admits only allow-listed client
public keys). Every binding process of a service started with CURVE keys makes every socket it
binds a CURVE server; every connecting socket (children, ``TextClient``, ``EngineLink``) is a
CURVE client holding a key pair whose public key is on the allow-list.
"""

from __future__ import annotations

import logging
import os
import socket as _socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
import zmq
import zmq.utils.z85

from textproc.config import Endpoints
from textproc.errors import InvalidInput, short

__all__ = [
    "FrameDecoder",
    "encoder",
    "make_socket",
    "close_sockets",
    "pick_free_ports",
    "remove_ipc_files",
    "RECONNECT_IVL_MS",
    "ChildRuntime",
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

T = TypeVar("T")
RECONNECT_IVL_MS = 50  # a restarted process is reconnected to within ~50 ms
RECONNECT_IVL_MAX_MS = 500
_LOG_FIRST_N = 20  # malformed frames logged in full per socket, then every _LOG_EVERY-th
_LOG_EVERY = 1000
_RECEIVING = {zmq.PULL, zmq.ROUTER, zmq.DEALER, zmq.SUB, zmq.PAIR}

_log = logging.getLogger("textproc.transport")
_ENCODER = msgspec.msgpack.Encoder()


def encoder() -> msgspec.msgpack.Encoder:
    """The shared msgpack encoder (reused: building one per frame costs more than encoding)."""
    return _ENCODER


class FrameDecoder(Generic[T]):
    """One typed decoder for one socket; counts frames and malformed frames.

    ``decode(data, peer=...)`` returns the struct, or None after counting and logging a frame
    that is not valid MessagePack, has an unknown tag or wrong field types.
    """

    def __init__(self, frame_type: Any, *, socket_name: str) -> None:
        self.socket_name = socket_name
        self.received = 0
        self.malformed = 0
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(frame_type)

    def decode(self, data: bytes | memoryview, *, peer: str = "") -> T | None:
        self.received += 1
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.count_malformed(f"{type(e).__name__}: {e}", data=data, peer=peer)
            return None
        except RecursionError:  # a small frame nested ~1000 deep inside an Any field
            self.count_malformed("nested too deep to decode", data=data, peer=peer)
            return None

    def decode_routed(self, parts: list[bytes]) -> tuple[bytes, T | None]:
        """``[client id, frame]`` as received on a ROUTER: the client id and the struct, or
        None (counted and logged) for a frame that does not decode or a wrong part count."""
        if len(parts) != 2:
            self.count_malformed(f"expected [client id, frame], got {len(parts)} parts",
                                 data=parts[-1], peer=parts[0].hex())
            return parts[0], None
        client_id, data = parts
        return client_id, self.decode(data, peer=client_id.hex())

    def count_malformed(self, why: str, *, data: bytes | memoryview = b"", peer: str = "") -> None:
        """Count one malformed frame on this socket and log it (rate-limited)."""
        self.malformed += 1
        if self.malformed <= _LOG_FIRST_N or self.malformed % _LOG_EVERY == 0:
            head = bytes(data[:32])
            _log.warning(
                "malformed frame #%d on %s from peer %r (%d bytes, starts %r): %s",
                self.malformed,
                self.socket_name,
                peer,
                len(data),
                head,
                why[:300],
            )

    def counters(self) -> dict[str, int]:
        return {
            f"frames_received.{self.socket_name}": self.received,
            f"frames_malformed.{self.socket_name}": self.malformed,
        }


def make_socket(
    ctx: zmq.Context[Any],
    kind: int,
    *,
    max_frame_bytes: int,
    hwm: int,
    routing_id: bytes | None = None,
    curve_server: CurveServerKeys | None = None,
    curve_client: CurveClientKeys | None = None,
) -> zmq.Socket[Any]:
    """A socket with textproc's options: linger 0, HWMs, MAXMSGSIZE where it receives.

    ``curve_server`` (a socket this process binds) or ``curve_client`` (one it connects) turn
    on CURVE encryption and authentication.
    """
    sock: zmq.Socket[Any] = ctx.socket(kind)
    if curve_server is not None:
        apply_curve_server(sock, curve_server)
    elif curve_client is not None:
        apply_curve_client(sock, curve_client)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    if kind in _RECEIVING:
        sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    if kind == zmq.ROUTER:
        # unroutable outputs raise EHOSTUNREACH instead of vanishing: the request is aborted
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    return sock


def close_sockets(sockets: list[zmq.Socket[Any]]) -> None:
    """Close every socket with linger 0 (safe to call twice)."""
    for sock in sockets:
        if not sock.closed:
            sock.close(linger=0)


def pick_free_ports(host: str, n: int) -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound to port 0, then released)."""
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    held: list[_socket.socket] = []
    try:
        for _ in range(n):
            s = _socket.socket(family, _socket.SOCK_STREAM)
            s.bind((host, 0))
            held.append(s)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def remove_ipc_files(endpoints: Endpoints) -> list[str]:
    """Unlink the socket files of ipc:// endpoints; returns the paths removed."""
    removed = []
    addresses = [endpoints.control, endpoints.events, endpoints.detok_in, endpoints.detok_front,
                 endpoints.engine_in, endpoints.engine_out, *endpoints.workers]
    for address in addresses:
        if address.startswith("ipc://"):
            path = address[len("ipc://"):]
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed


class ChildRuntime:
    """What every child process entry shares: logging, signals, parent watch, Ready to control.

    SIGINT is ignored (Ctrl-C reaches the whole process group; the supervisor then stops its
    children in order); SIGTERM sets ``should_stop``. ``parent_alive()`` is False once the
    supervisor that started this process is gone, so no child outlives it for long.
    """

    def __init__(self, *, role: str, index: int, parent_pid: int, log_level: str) -> None:
        self.role = role
        self.index = index
        self.parent_pid = parent_pid
        self.log_level = log_level
        self.should_stop = False

    def start(self) -> None:
        import signal

        logging.basicConfig(
            level=self.log_level,
            format=f"%(asctime)s {self.role}-{self.index}[%(process)d] %(levelname)s %(name)s: %(message)s",
        )
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: object) -> None:
        self.should_stop = True

    def parent_alive(self) -> bool:
        return self.parent_pid <= 0 or os.getppid() == self.parent_pid

    def send_ready(self, control: zmq.Socket[Any], *, role: str | None = None, pid: int | None = None) -> None:
        """Tell the supervisor (PUSH connected to its ``control`` PULL) that ``role`` serves now."""
        from textproc.protocol import Ready

        frame = Ready(role or self.role, self.index, os.getpid() if pid is None else pid)
        try:
            control.send(_ENCODER.encode(frame), flags=zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("control socket full; Ready(%s) not sent", frame.role)


# -- CURVE -------------------------------------------------------------------------------------

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
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx, log=logging.getLogger("textproc.zap"))
    auth.start()
    auth.configure_curve_callback(domain=_ZAP_DOMAIN, credentials_provider=_AllowList(keys.authorized))
    return auth
