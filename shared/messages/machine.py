"""The machine around a measurement, as results carry it: what else used the machine during
each timed window (``MachineWindow``), and the noise probe timed before the warm-up and after
the timed queries (``NoiseProbe``).

Both travel in the measured event and in the analyzer's report. Reading the machine (the
snapshots, their arithmetic) and running the probe are shared.measurement's (``window``,
``readings``, ``noise``); here is only what they record.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PROBE_REPETITIONS",
    "PROBE_SIZE",
    "PROBE_SPAN_S",
    "PROBE_WORKLOAD",
    "MachineWindow",
    "NoiseProbe",
]

# The noise probe's workload (shared.measurement.noise runs it): sorting PROBE_SIZE fixed
# doubles, the fastest of at least PROBE_REPETITIONS runs spanning at least PROBE_SPAN_S.
# The span is what makes the minimum the machine's speed: a 2-vCPU VM is often one core's
# two hyperthreads, and a burst of work on the sibling (a broker or a database storing the
# run's first events) slows every run of a 3 ms probe; it seldom lasts 30 ms. Defined here
# because a probe names its workload by default, and that name must say exactly what was run:
# two probes are comparable only on one workload.
PROBE_REPETITIONS = 11
PROBE_SPAN_S = 0.03
PROBE_SIZE = 1 << 16
PROBE_WORKLOAD = (
    f"numpy sort of {PROBE_SIZE} fixed doubles, fastest of at least {PROBE_REPETITIONS} runs "
    f"over at least {PROBE_SPAN_S * 1e3:.0f} ms"
)


class MachineWindow(BaseModel):
    """What the machine did during one timed window (one timed phase)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    started_at_ns: int = Field(description="wall clock (ns since the epoch) as the loop began")
    ended_at_ns: int = Field(description="wall clock as it ended")
    duration_ns: int = Field(ge=0, description="perf_counter time between the snapshots")
    cpus: int = Field(ge=1, description="logical CPUs this process may run on")
    own_cpu_s: float = Field(
        description="CPU time of the measuring process, all its threads (and of a local "
        "server it measures)"
    )
    thread_cpu_s: float | None = Field(
        default=None,
        ge=0,
        description="CPU time of the thread that began and ended the window: a served "
        "model's client, whose requests are issued and read from one event loop",
    )
    busy_cpu_s: float | None = Field(
        default=None, description="busy time of those CPUs (/proc/stat), everyone's"
    )
    steal_s: float | None = Field(default=None, description="time stolen by the hypervisor")
    resolution_s: float | None = Field(
        default=None, description="uncertainty of busy_cpu_s: two ticks per CPU"
    )
    load_average: tuple[float, float, float] | None = Field(
        default=None, description="1, 5 and 15 minutes, at the window's end"
    )
    frequency_mhz: tuple[float, float] | None = Field(
        default=None, description="lowest and highest CPU clock seen at either end"
    )
    throttle_events: int | None = Field(
        default=None, description="thermal throttling events during the window"
    )
    energy_j: float | None = None
    energy_source: str | None = None
    gpu_processes: tuple[int, ...] | None = Field(
        default=None, description="other processes on the measured GPU, at either end"
    )
    device_memory_bytes: int | None = Field(
        default=None,
        ge=0,
        description="device memory the measuring process held on the measured GPU (NVML), "
        "the larger of the two ends: frameworks keep their allocator's pool, so in practice "
        "the peak",
    )
    not_exposed: dict[str, str] = Field(
        default_factory=dict, description="figures this machine does not give, and why"
    )

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def other_cpu_s(self) -> float | None:
        """Other processes' CPU time on these CPUs (never below zero: ticks are coarse)."""
        if self.busy_cpu_s is None:
            return None
        return max(self.busy_cpu_s - self.own_cpu_s, 0.0)

    @property
    def other_cores(self) -> float | None:
        """Other processes' CPU time per second of the window: cores they kept busy."""
        other = self.other_cpu_s
        if other is None or self.duration_ns <= 0:
            return None
        return other / self.duration_s

    @property
    def other_cores_resolution(self) -> float | None:
        if self.resolution_s is None or self.duration_ns <= 0:
            return None
        return self.resolution_s / self.duration_s

    @property
    def steal_share(self) -> float | None:
        if self.steal_s is None or self.duration_ns <= 0:
            return None
        return self.steal_s / (self.cpus * self.duration_s)


class NoiseProbe(BaseModel):
    """The probe's time before the warm-up and after the timed queries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str = PROBE_WORKLOAD
    before_ns: int = Field(gt=0, description="fastest repetition before the warm-up")
    after_ns: int = Field(gt=0, description="fastest repetition after the timed queries")

    @property
    def shift(self) -> float:
        """How much slower (positive) or faster the machine ran the probe afterwards."""
        return self.after_ns / self.before_ns - 1
