"""A quiet machine to start a quiet run on: how busy every CPU was over a second, and a wait
for a second in which it was nearly idle (/proc/stat, everyone's time)."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["QUIET_BELOW", "machine_busy", "wait_until_quiet"]

# At most this share of every CPU's time busy in a second: nearly idle, a run may start.
QUIET_BELOW = 0.05


def machine_busy(seconds: float = 1.0) -> float:
    """The share of every CPU's time that was busy over ``seconds`` (/proc/stat)."""

    def busy_total() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        user, nice, system, idle, iowait, irq, softirq, steal = values
        busy = user + nice + system + irq + softirq + steal
        return busy, busy + idle + iowait

    busy0, total0 = busy_total()
    time.sleep(seconds)
    busy1, total1 = busy_total()
    return (busy1 - busy0) / max(total1 - total0, 1)


def wait_until_quiet(limit: float = QUIET_BELOW, patience_s: float = 900) -> float:
    """Wait (up to ``patience_s``) for a second in which the machine is at most ``limit``
    busy: a quiet run must start quiet. The busy share last seen."""
    deadline = time.monotonic() + patience_s
    while (busy := machine_busy()) > limit and time.monotonic() < deadline:
        time.sleep(2)
    return busy
