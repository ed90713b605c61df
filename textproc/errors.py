"""Exception hierarchy for textproc; every exception textproc raises comes from here.

Imports nothing from textproc. Messages say what was wrong (the bad value with
``!r``, truncated with :func:`short`), where (file and JSON path, request_id,
worker id or address) and what is allowed.
"""

from __future__ import annotations

__all__ = [
    "TextprocError",
    "InvalidInput",
    "TokenizerFileError",
    "TemplateError",
    "ProtocolError",
    "WorkerDied",
    "StartupTimeout",
    "short",
]


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for error messages.

    >>> short("x" * 200)[:12]
    "'xxxxxxxxxxx"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


class TextprocError(Exception):
    """Base class of every textproc error.

    Typed fields for whoever turns it into a reply: ``kind`` (a ``Failure`` kind such as
    ``"invalid_input"``, ``"overloaded"``, ``"timeout"``), ``status`` (the HTTP status a
    frontend answers with) and ``param`` (the request field at fault, or None). Each class
    has defaults; a keyword given to the constructor overrides them for that error.
    """

    kind: str = "internal"
    status: int = 500
    param: str | None = None

    def __init__(self, *args: object, kind: str | None = None, status: int | None = None,
                 param: str | None = None) -> None:
        super().__init__(*args)
        if kind is not None:
            self.kind = kind
        if status is not None:
            self.status = status
        if param is not None:
            self.param = param


class InvalidInput(TextprocError, ValueError):
    """Bad caller input: text, token ids, messages or options."""

    kind = "invalid_input"
    status = 400


class TokenizerFileError(TextprocError):
    """A tokenizer file (tokenizer.json, rank file, config) is malformed or unsupported."""


class TemplateError(TextprocError):
    """A chat template failed to compile or render (including sandbox and limit violations)."""

    kind = "template"
    status = 400


class ProtocolError(TextprocError):
    """A frame could not be decoded or broke the protocol."""


class WorkerDied(TextprocError):
    """A process that held a request exited; names the worker and its exit code."""

    kind = "worker_died"
    status = 503


class StartupTimeout(TextprocError):
    """A process did not report Ready in time; names what was awaited."""

    kind = "startup_timeout"
    status = 503
