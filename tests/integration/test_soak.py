"""Smoke test of ``bench/soak.py``: a few seconds of concurrent streams on the toy model.

Checks the soak's own machinery (service start, load mix, RSS table from /proc, stats at the
end) and the property it exists for: after thousands of mixed endings (finish, length, stop
string, client cancel, invalid request) the detokenizer holds no per-request state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.service import REPO

pytestmark = pytest.mark.timeout(120)


def test_soak_quick_smoke(toy_model: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "soak.py"), "--seconds", "4",
                          "--streams", "100", "--sample-s", "1", "--step-ms", "5",
                          "--model-dir", str(toy_model)],
                         capture_output=True, text=True, timeout=110, cwd=REPO)
    text = out.stdout + out.stderr
    assert "state verdict: OK: per-request state back to zero" in text, text[-3000:]
    assert "memory verdict:" in text and "detokenizer_MB" in text, text[-3000:]
    for ending in ("finish:stop=", "cancelled=", "error:invalid_input="):
        assert ending in text, (ending, text[-2000:])
    assert "live_requests=0, early_requests=0, live_clients=0" in text
