"""``python -m textproc.http``: the HTTP frontend process (see ``textproc.http.run``)."""

from __future__ import annotations

from textproc.http.run import main

__all__: list[str] = []

# a process entry like textproc.cli: the exit code is the process's answer
raise SystemExit(main())
