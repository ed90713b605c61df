"""Integration fixtures: the toy model directory (session), an engine-socket peer with an
EngineLink connected to it (``peer``, ``link``) for the EngineLink tests, and ``vllm serve`` of
the small real model (``vllm_reference``, session: started by the first real-engine module that
needs it, shared by the next; ~1 min of CPU to start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.engine_peer import EnginePeer
from tests.helpers.real_engine import reference_server
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


class LazyReference:
    """``vllm serve`` of the tiny model, started on the first ``start()``; ``url()`` waits."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server: object | None = None

    def start(self) -> LazyReference:
        if self.server is None:
            self.server = reference_server(self.root).start()
        return self

    def url(self) -> str:
        return str(self.start().server.wait())  # type: ignore[union-attr]

    @property
    def pid(self) -> int:
        return int(self.start().server.pid)  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def vllm_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LazyReference]:
    """``vllm serve`` of the small real model, shared by the modules that compare with it."""
    reference = LazyReference(tmp_path_factory.mktemp("vllm-serve"))
    yield reference
    reference.stop()
