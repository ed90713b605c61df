"""What a measurement ran on: CPU, cores, Python, load average, time; and the CPU seconds of a
process. Every benchmark prints and stores this with each result."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

__all__ = ["cpu_model", "machine", "describe", "cpu_seconds"]


def cpu_model(default: str = "") -> str:
    """The first ``model name`` in /proc/cpuinfo, else ``default``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def machine(*, versions: bool = False) -> dict[str, Any]:
    """nproc, CPU model, Python, load average and UTC time; ``versions`` adds the platform and
    the ZeroMQ, pyzmq and msgspec versions (for the benchmarks of the transport)."""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(platform.processor() or ""),
        "python": platform.python_version(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    if versions:
        # here: a text-core benchmark describing its machine loads no transport modules
        import msgspec
        import zmq

        info.update(platform=platform.platform(), zmq=zmq.zmq_version(), pyzmq=zmq.__version__,
                    msgspec=msgspec.__version__)
    return info


def describe(info: dict[str, Any]) -> str:
    """One line for the top of a report, from ``machine()``."""
    la = info["load_avg"]
    return (f"{info['utc']} UTC; nproc {info['nproc']}, {info['cpu']}, Python {info['python']}; "
            f"load average {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc), 0.0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
