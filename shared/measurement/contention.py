"""Other processes competing for the CPU, read at a run's start for the validity verdict."""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

__all__ = ["heavy_processes"]


def heavy_processes(min_cpu_percent: float = 50.0, sample_s: float = 0.2) -> list[dict[str, Any]]:
    """Processes other than this one using at least ``min_cpu_percent`` of one CPU over
    ``sample_s`` seconds (psutil needs two readings to know a rate), busiest first. Goes into
    the environment as ``heavy_processes``."""
    own = os.getpid()
    watched = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] == own:
            continue
        try:
            process.cpu_percent(None)  # the first reading only starts the interval
        except psutil.Error:
            continue
        watched.append(process)
    time.sleep(sample_s)
    busy = []
    for process in watched:
        try:
            percent = process.cpu_percent(None)
        except psutil.Error:
            continue  # ended meanwhile, or not ours to read
        if percent >= min_cpu_percent:
            busy.append(
                {"pid": process.info["pid"], "name": process.info["name"], "cpu_percent": percent}
            )
    return sorted(busy, key=lambda p: -float(p["cpu_percent"]))
