"""Integration fixtures: the toy model directory (session), and an engine-socket peer with an
EngineLink connected to it (``peer``, ``link``) for the EngineLink tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.engine_peer import EnginePeer
from tests.helpers.service import build_toy_model
from textproc.engine import EngineLink
from textproc.protocol import EngineHello


@pytest.fixture(scope="session")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen-like byte-level BPE model dir built with HF tokenizers (no fetched files)."""
    return build_toy_model(tmp_path_factory.mktemp("toy-model"))


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[EnginePeer]:
    """textproc's side of the two engine sockets, bound in ``tmp_path``."""
    p = EnginePeer(tmp_path)
    yield p
    p.close()


@pytest.fixture
def link(peer: EnginePeer) -> Iterator[EngineLink]:
    """An EngineLink connected to ``peer``, its EngineHello already received."""
    lk = EngineLink.connect(peer.engine_in, peer.engine_out)
    assert peer.recv() == EngineHello(lk.instance_id)
    yield lk
    lk.close()
