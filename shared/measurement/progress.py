"""Where a measurement is, for the person waiting on it.

A measurement reports a ``Step`` each time it moves on: a phase ("loading the model",
"running the scenario", "measuring accuracy") and, inside the scenario, the part ("warming
up", "timed queries, batch 8 (2 of 6)") with how long that part should take. Steps are
reported between parts, never inside a timed loop: the time left is computed by whoever
shows it, from when the step arrived and ``expected_s``, not from ticks sent by the loop.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.measurement.scenarios import ScenarioPlan

__all__ = [
    "SCENARIO",
    "WAITING_FOR_DEVICE",
    "OnStep",
    "Step",
    "expected_timed_s",
    "ignore_steps",
    "sweep_label",
    "timed_queries",
    "typical_ns",
    "warming_up",
]

# The phase every part of a scenario run belongs to; a crash report says "while <phase>".
SCENARIO = "running the scenario"
# The phase of a job waiting for its device's lease, which another measurement holds.
WAITING_FOR_DEVICE = "waiting for the device"


@dataclass(frozen=True)
class Step:
    phase: str
    part: str = ""
    # About how long the part should take (from the warm-up's latencies and the
    # scenario's minimums); None when nothing says.
    expected_s: float | None = None
    # The part stops by then, whatever happens (a warm-up's or timed phase's cap).
    limit_s: float | None = None

    def __str__(self) -> str:
        return f"{self.phase}: {self.part}" if self.part else self.phase


OnStep = Callable[[Step], None]


def ignore_steps(step: Step) -> None:
    """For callers with nobody waiting."""


def expected_timed_s(
    *, per_query_ns: float, min_queries: int, min_duration_s: float, max_duration_s: float
) -> float:
    """How long a timed phase should last: until both minimums are met, at most its cap.
    ``per_query_ns`` is the warm-up's typical latency, so the estimate follows the model."""
    by_count = min_queries * per_query_ns / 1e9
    return min(max(min_duration_s, by_count), max_duration_s)


def typical_ns(warmup_latencies_ns: Sequence[int], first_ns: int) -> float:
    """A query's typical latency once warm: the warm-up's median (the first query when
    warm-up is disabled)."""
    return statistics.median(warmup_latencies_ns) if warmup_latencies_ns else float(first_ns)


def warming_up(scenario: ScenarioPlan, label: str = "") -> Step:
    warmup = scenario.warmup
    return Step(
        SCENARIO,
        f"warming up{label}",
        limit_s=warmup.max_duration_s if warmup.max_windows else None,
    )


def timed_queries(scenario: ScenarioPlan, label: str, expected_s: float) -> Step:
    return Step(
        SCENARIO, f"timed queries{label}", expected_s=expected_s, limit_s=scenario.max_duration_s
    )


def sweep_label(batch_size: int, number: int, count: int) -> str:
    """What a batch sweep's part adds: ", batch 8 (2 of 6)"; ", batch 8" alone."""
    return f", batch {batch_size}" + (f" ({number} of {count})" if count > 1 else "")
