"""What a worker runs on: announced as capabilities, and captured at every evaluation's start."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

__all__ = ["capabilities", "environment", "host_name"]


def host_name() -> str:
    return socket.gethostname()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _governor() -> str | None:
    try:
        return Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip()
    except OSError:
        return None  # containers and VMs often hide it


def _dlscope_version() -> str:
    try:
        return version("dlscope")
    except PackageNotFoundError:
        return "unknown"


def capabilities() -> dict[str, Any]:
    return {
        "host": host_name(),
        "cpu_model": _cpu_model(),
        "cpu_cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "cpu_threads": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
    }


def environment(framework: dict[str, Any], *, seed: int) -> dict[str, Any]:
    """Everything needed to reproduce or question a measurement, read at its start."""
    load1, load5, load15 = os.getloadavg()
    return {
        **capabilities(),
        **framework,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_governor": _governor(),
        "load_average": [load1, load5, load15],
        "memory_available_bytes": psutil.virtual_memory().available,
        "dlscope_version": _dlscope_version(),
        "numpy_version": version("numpy"),
        "seed": seed,
    }
