"""A crowd of HTTP streams that read a few events and leave, against an engine stepping as fast
as it can: every disconnect reaches the engine as an abort (before the fix: none of
200 did, each ran its 4,000 tokens; /health took seconds), and the ``--health`` port answers
every probe meanwhile. Runs ``bench/crowd.py`` small, on the toy vocabulary, and checks what it
reports; timings are printed, not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.service import REPO

pytestmark = pytest.mark.timeout(180)


def test_streams_that_leave_are_aborted_in_the_engine(tmp_path: Path, toy_model: Path) -> None:
    out = tmp_path / "crowd.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "crowd.py"), "--streams", "100", "--rounds", "1",
         # 20,000 tokens: room for a slow abort on a loaded box, and on main none came at all
         "--events", "3", "--max-tokens", "20000", "--workers", "1", "--model-dir",
         str(toy_model), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = json.loads(out.read_text().splitlines()[-1])
    print(json.dumps(row))
    assert row["left_early"] == 100 and row["refused"] == 0
    assert row["aborted"] == 100, row  # none ran on to length, none is still running
    assert row["worker_shares"] == {"0": 100}
    assert row["health_probes"] > 0 and row["http_rss_mb_after"] > 0
    # the --health port's thread answered every probe (its latency is printed, not asserted)
    assert row["health_port_probes"] > 0 and row["health_port_failed"] == 0, row
