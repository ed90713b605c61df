"""A second host for integration tests: a network namespace joined to this one by a veth pair
(``ip netns``, root only), so a process in it reaches this host over TCP through a link the test
can take down and bring back, as a machine whose network goes away."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["Netns", "netns_missing"]


def netns_missing() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Netns:
    """A namespace ``name`` whose address is ``remote`` (``host`` is this side's), linked by
    ``veth`` (this side) and ``veth``-peer. ``up()`` / ``down()`` the link; ``close()`` removes
    both."""

    def __init__(self, name: str, subnet: int) -> None:
        self.name = name
        self.veth = f"{name[:10]}-h"
        self.peer = f"{name[:10]}-r"
        self.host = f"10.{subnet}.0.1"
        self.remote = f"10.{subnet}.0.2"

    def create(self) -> Netns:
        """Make the namespace and the link (``CalledProcessError`` where this box may not;
        nothing is left behind then)."""
        self.close()
        try:
            _ip("netns", "add", self.name)
            _ip("link", "add", self.veth, "type", "veth", "peer", "name", self.peer)
            _ip("link", "set", self.peer, "netns", self.name)
            _ip("addr", "add", f"{self.host}/24", "dev", self.veth)
            _ip("link", "set", self.veth, "up")
            _ip("netns", "exec", self.name, "ip", "addr", "add", f"{self.remote}/24", "dev", self.peer)
            _ip("netns", "exec", self.name, "ip", "link", "set", self.peer, "up")
            _ip("netns", "exec", self.name, "ip", "link", "set", "lo", "up")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.close()
            raise
        return self

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def down(self) -> None:
        _ip("link", "set", self.veth, "down")

    def up(self) -> None:
        _ip("link", "set", self.veth, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
