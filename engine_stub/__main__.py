"""``python -m engine_stub``: run the fake engine until SIGTERM/SIGINT."""

from __future__ import annotations

from engine_stub.stub import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
