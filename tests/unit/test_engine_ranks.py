"""/health's view of several engines: the ranks the front writes to the engine's stats file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from textproc.http.engine_ranks import EngineRanks


def _write(path: Path, engines: list[dict[str, object]], *, stamp: int) -> None:
    path.write_text(json.dumps({"engine": "vllm", "engines": engines}))
    os.utime(path, ns=(stamp, stamp))  # a new mtime for each write, however fast


def test_no_file_or_no_ranks_says_nothing(tmp_path: Path) -> None:
    assert EngineRanks(None).check() == (True, "")
    assert EngineRanks(str(tmp_path / "absent.json")).check() == (True, "")
    stub = tmp_path / "stub.json"
    stub.write_text(json.dumps({"requests": {}}))  # one engine's stats: no ranks
    assert EngineRanks(str(stub)).check() == (True, "")


def test_ranks_not_ready_are_named_and_none_ready_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "engine-stats.json"
    ranks = EngineRanks(str(path))
    _write(path, [{"rank": 0, "state": "ready"}, {"rank": 1, "state": "ready"}], stamp=1)
    assert ranks.check() == (True, "")
    _write(path, [{"rank": 0, "state": "ready"},
                  {"rank": 1, "state": "waiting", "state_for_s": 35.2}], stamp=2)
    assert ranks.check() == (True, "1 of 2 engines ready; engine rank 1 has not connected (for 35 s)")
    _write(path, [{"rank": 0, "state": "dead", "died": "its process exited with 1", "state_for_s": 2},
                  {"rank": 1, "state": "suspect", "state_for_s": 1}], stamp=3)
    serving, why = ranks.check()
    assert not serving
    assert why == ("no engine is ready: engine rank 0 is dead (for 2 s): its process exited with 1; "
                   "engine rank 1 lost its connection; waiting for it to dial again (for 1 s)")


def test_a_file_read_mid_write_keeps_the_last_answer(tmp_path: Path) -> None:
    path = tmp_path / "engine-stats.json"
    ranks = EngineRanks(str(path))
    _write(path, [{"rank": 0, "state": "ready"}, {"rank": 1, "state": "dead"}], stamp=1)
    first = ranks.check()
    path.write_text('{"engines": [')  # torn: never happens with the front's atomic writes
    os.utime(path, ns=(2, 2))
    assert ranks.check() == first
