"""What a result cost, as results carry it: CPU seconds and energy per query, peak memory
(``RunCost``), with the machine's windows and noise probe beside it (``MachineReport``), and
the job's own readings that the measured event carries to make them (``JobReadings``).

The analyzer's completed event carries the report, an experiment's comparison each member's
cost. Reading the peak and computing the figures are shared.measurement.cost's; how each
figure is measured, and why that way, is said there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.messages.machine import MachineWindow, NoiseProbe
from shared.values import Frozen

__all__ = ["JobReadings", "MachineReport", "PeakMemory", "RunCost"]


class PeakMemory(Frozen):
    bytes: int = Field(ge=0)
    scope: Literal["job", "process"] = Field(
        description="job: since the job started; process: since the framework process started"
    )
    method: str = Field(description="how it was read, and why that way")


class JobReadings(Frozen):
    """What the measuring process read about the job besides the timed windows."""

    noise: NoiseProbe | None = Field(
        default=None, description="the noise probe before the warm-up and after the queries"
    )
    peak_memory: PeakMemory | None = None


class RunCost(Frozen):
    """The cost of the headline phase's queries, and the job's peak memory."""

    queries: int = Field(ge=0, description="queries timed in the window")
    samples_per_query: int = Field(default=1, ge=1)
    cpu_s: float | None = Field(default=None, description="CPU time of the window, all threads")
    cpu_s_per_query: float | None = None
    peak_memory: PeakMemory | None = None
    device_memory_bytes: int | None = Field(
        default=None, ge=0, description="on a GPU: what the framework process held there"
    )
    energy_j_per_query: float | None = None
    energy_source: str | None = None
    not_measured: dict[str, str] = Field(
        default_factory=dict,
        description="cpu, memory, device_memory or energy: why it was not measured",
    )


class MachineReport(Frozen):
    """What a result cost, and what else used the machine while it was measured."""

    cost: RunCost
    windows: tuple[MachineWindow, ...] = Field(
        default=(), description="one per timed phase, in order (per batch size in a sweep)"
    )
    noise: NoiseProbe | None = None
