"""What a result cost: CPU seconds per query, peak memory, energy per query.

- CPU per query: the measuring process's CPU time over the timed window (every thread of it:
  a framework's thread pool included) divided by the queries timed in it.
- Peak memory: the framework process's resident high-water mark over the job. The process
  outlives its jobs, so the mark is reset at the job's start (writing 5 to
  /proc/self/clear_refs) and read at its end (VmHWM in /proc/self/status). Where the reset is
  refused, the peak is ru_maxrss, and said to be since the process started.
- Device memory, on a GPU: what the framework process holds on the measured GPU at the
  headline window's ends, per NVML (frameworks keep their allocator's pool, so in practice
  its peak); on a CPU run there is none to report.
- Energy per query: the window's energy (RAPL package counters, NVML's on a GPU) divided by
  its queries; where no counter can be read, "not measured" and why, never an estimate.

The readings of the job (``JobReadings``: the noise probe and the peak) travel in the
measured event; ``run_cost`` makes the result's figures of them and the headline window. The
figures travel in results and are defined with them (shared.messages.costs).
"""

from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.measurement.window import MachineWindow
from shared.messages.costs import JobReadings, MachineReport, PeakMemory, RunCost

__all__ = [
    "JobReadings",
    "MachineReport",
    "PeakMemory",
    "PeakMemoryMark",
    "RunCost",
    "machine_report",
    "peak_memory",
    "reset_peak_memory",
    "run_cost",
]

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
# linux/fs/proc/task_mmu.c: "5" resets the peak RSS (VmHWM) to the current RSS.
_RESET_PEAK = "5"


@dataclass(frozen=True, slots=True)
class PeakMemoryMark:
    """Whether the high-water mark was reset at the job's start, and why not."""

    reset: bool
    why: str = ""


def reset_peak_memory(clear_refs: Path = _CLEAR_REFS) -> PeakMemoryMark:
    """Reset this process's peak RSS to its current RSS (at a job's start)."""
    try:
        clear_refs.write_text(_RESET_PEAK)
    except OSError as exc:  # a read-only /proc, a kernel before 4.0, a sandbox
        return PeakMemoryMark(False, f"{clear_refs} could not be written: {exc.strerror or exc}")
    return PeakMemoryMark(True)


def peak_memory(mark: PeakMemoryMark, status: Path = _STATUS) -> PeakMemory:
    """This process's peak RSS since ``mark`` (the job's start), or since it started."""
    if mark.reset:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    kib = int(line.split()[1])
                    return PeakMemory(
                        bytes=kib * 1024,
                        scope="job",
                        method="VmHWM, reset at the job's start (/proc/self/clear_refs)",
                    )
        except (OSError, ValueError, IndexError):
            pass
        why = f"{status} gives no VmHWM"
    else:
        why = mark.why
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return PeakMemory(
        bytes=kib * 1024,
        scope="process",
        method=f"ru_maxrss, since the framework process started ({why})",
    )


def machine_report(
    windows: Sequence[MachineWindow | None],
    queries: int,
    samples_per_query: int,
    readings: JobReadings | None,
) -> MachineReport:
    """The report of a run whose phases had ``windows`` (the first is the headline's, which
    timed ``queries`` of ``samples_per_query``), with the job's ``readings``."""
    return MachineReport(
        cost=run_cost(windows[0] if windows else None, queries, samples_per_query, readings),
        windows=tuple(window for window in windows if window is not None),
        noise=None if readings is None else readings.noise,
    )


def run_cost(
    window: MachineWindow | None,
    queries: int,
    samples_per_query: int,
    readings: JobReadings | None,
) -> RunCost:
    """The cost figures of a run whose headline phase timed ``queries`` in ``window``."""
    not_measured: dict[str, str] = {}
    cpu_s = cpu_per_query = energy_per_query = device_memory = None
    energy_source = None
    if window is None:
        why = "no timed window was recorded (a measurement from before dlscope recorded one)"
        not_measured["cpu"] = not_measured["energy"] = why
    else:
        cpu_s = window.own_cpu_s
        cpu_per_query = cpu_s / queries if queries else None
        if window.energy_j is not None and queries:
            energy_per_query = window.energy_j / queries
            energy_source = window.energy_source
        else:
            not_measured["energy"] = window.not_exposed.get(
                "energy", "not measured: no energy counter was read"
            )
        device_memory = window.device_memory_bytes
        # A GPU run is one whose window looked at a GPU: its processes, or why it could not.
        gpu_run = window.gpu_processes is not None or "gpu" in window.not_exposed
        if device_memory is None and gpu_run:
            not_measured["device_memory"] = window.not_exposed.get(
                "device_memory", window.not_exposed.get("gpu", "not measured")
            )
    peak = None if readings is None else readings.peak_memory
    if peak is None:
        not_measured["memory"] = "not measured: the worker recorded no peak memory"
    return RunCost(
        queries=queries,
        samples_per_query=samples_per_query,
        cpu_s=cpu_s,
        cpu_s_per_query=cpu_per_query,
        peak_memory=peak,
        device_memory_bytes=device_memory,
        energy_j_per_query=energy_per_query,
        energy_source=energy_source,
        not_measured=not_measured,
    )
