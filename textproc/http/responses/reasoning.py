"""The Responses API's ``encrypted_content`` of reasoning items: sealed for the client, readable
to the service.

With ``include: ["reasoning.encrypted_content"]`` a reasoning item carries its text sealed with
a per-service secret, so a client that keeps no reasoning of its own (``store: false``, as Codex
CLI runs) can hand the item back in ``input`` and the text becomes the assistant's reasoning in
the prompt again. The client cannot read or alter it: the text is encrypted with a keystream of
HMAC-SHA256 blocks (counter mode over a random 16-byte nonce) and the whole token is
authenticated with HMAC-SHA256 (encrypt-then-MAC, separate keys derived from the secret). Stdlib
only. A token is ``tp1.`` + base64url(nonce + ciphertext + 32-byte tag); the version prefix lets
a later format be told apart. Pure apart from :meth:`ReasoningSeal.for_service` (the key file).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from pathlib import Path

__all__ = ["ReasoningSeal", "SEAL_VERSION", "KEY_FILE"]

SEAL_VERSION = "tp1"
KEY_FILE = "responses.key"  # in the service's runtime dir: every frontend reads the same secret
_KEY_BYTES = 32
_NONCE_BYTES = 16
_TAG_BYTES = 32
_BLOCK_BYTES = 32  # one HMAC-SHA256 output


class ReasoningSeal:
    """Seals reasoning text into an opaque token and opens such tokens again.

    ``open(seal(text)) == text`` for the same secret; a token sealed with another secret, cut,
    altered or of another version opens to None.

    >>> seal = ReasoningSeal(bytes(32))
    >>> seal.open(seal.seal("2+2 is 4"))
    '2+2 is 4'
    >>> seal.open("tp1.AAAA") is None
    True
    """

    def __init__(self, secret: bytes) -> None:
        self._enc_key = hmac.digest(secret, b"textproc reasoning encryption", "sha256")
        self._mac_key = hmac.digest(secret, b"textproc reasoning authentication", "sha256")

    @classmethod
    def random(cls) -> ReasoningSeal:
        """A seal with a fresh secret (one process's: tokens do not survive it)."""
        return cls(secrets.token_bytes(_KEY_BYTES))

    @classmethod
    def for_service(cls, runtime_dir: Path | None) -> ReasoningSeal:
        """The seal of the service in ``runtime_dir`` (its ``responses.key``, created once by
        whichever frontend comes first, mode 0600), or a random one without a runtime dir."""
        if runtime_dir is None:
            return cls.random()
        path = Path(runtime_dir) / KEY_FILE
        try:
            return cls(_read_key(path))
        except FileNotFoundError:
            pass
        tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_bytes(_KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic: the first frontend's key wins, whole
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return cls(_read_key(path))

    def seal(self, text: str) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        data = text.encode()
        body = nonce + self._xor(data, nonce)
        tag = hmac.digest(self._mac_key, SEAL_VERSION.encode() + body, "sha256")
        return f"{SEAL_VERSION}." + base64.urlsafe_b64encode(body + tag).decode().rstrip("=")

    def open(self, token: str) -> str | None:
        """The text sealed in ``token``, or None when it is not one of this service's."""
        version, dot, encoded = token.partition(".")
        if version != SEAL_VERSION or not dot:
            return None
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) < _NONCE_BYTES + _TAG_BYTES:
            return None
        body, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if not hmac.compare_digest(
                tag, hmac.digest(self._mac_key, SEAL_VERSION.encode() + body, "sha256")):
            return None
        nonce, data = body[:_NONCE_BYTES], body[_NONCE_BYTES:]
        plain = self._xor(data, nonce)
        try:
            return plain.decode()
        except UnicodeDecodeError:  # authenticated, so only a bug of ours gets here
            return None

    def _xor(self, data: bytes, nonce: bytes) -> bytes:
        """``data`` XOR the keystream of ``nonce`` (HMAC-SHA256 of nonce + block counter)."""
        stream = b"".join(hmac.digest(self._enc_key, nonce + i.to_bytes(8, "big"), "sha256")
                          for i in range((len(data) + _BLOCK_BYTES - 1) // _BLOCK_BYTES))
        mixed = int.from_bytes(data, "big") ^ int.from_bytes(stream[:len(data)], "big")
        return mixed.to_bytes(len(data), "big")


def _read_key(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) != _KEY_BYTES:
        raise OSError(f"{path} holds {len(data)} bytes, not a {_KEY_BYTES}-byte key; remove it "
                      "and restart the service")
    return data

