"""What else used the machine during a timed window, from two snapshots: one just before the
timed loop, one just after it. Nothing samples inside the loop.

A snapshot (``readings.snapshot``) holds counters: the busy and steal ticks of each CPU this
process may run on (/proc/stat), this process's own CPU time (every thread of it), the
energy counters (RAPL, NVML) and the throttle counts, plus a few gauges (load average, CPU
frequency, the processes on the GPU). The window is the arithmetic between two of them
(``window_between``), pure, so it is tested on synthetic readings. What it makes, a
``MachineWindow``, travels in results and is defined with them (shared.messages.machine).

The arithmetic:

- other processes' CPU time = the CPUs' busy time - ours, whoever the others are (other
  programs, other dlscope workers and their framework processes, the worker that started
  this process); given in cores (CPU seconds per second of the window);
- steal = time the hypervisor gave these CPUs to another guest, as a share of their time;
- energy = the counters' difference, with RAPL's wrap-around at ``max_energy_range_uj``.

/proc/stat counts in ticks (``USER_HZ``, 10 ms), sampled: each CPU's busy time is known to a
tick at each end, so a window's other-process time carries ``resolution_s`` (two ticks per
CPU) of uncertainty; a short window is judged with that margin, never on the noise.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from shared.messages.machine import MachineWindow

__all__ = [
    "CpuTicks",
    "EnergyCounters",
    "MachineWindow",
    "Snapshot",
    "WindowWatch",
    "parse_proc_stat",
    "window_between",
]


@dataclass(frozen=True, slots=True)
class CpuTicks:
    """One CPU's line of /proc/stat, in ticks."""

    busy: int  # user + nice + system + irq + softirq (guest time is already inside user)
    steal: int
    total: int  # busy + idle + iowait + steal


def parse_proc_stat(text: str, cpus: Collection[int]) -> dict[int, CpuTicks]:
    """The ``cpuN`` lines of /proc/stat for the CPUs in ``cpus``."""
    ticks: dict[int, CpuTicks] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        number = int(name[3:])
        if number not in cpus:
            continue
        # user nice system idle iowait irq softirq steal [guest guest_nice]
        values = [int(v) for v in rest.split()] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
        busy = user + nice + system + irq + softirq
        ticks[number] = CpuTicks(busy=busy, steal=steal, total=busy + idle + iowait + steal)
    return ticks


@dataclass(frozen=True, slots=True)
class EnergyCounters:
    """Cumulative energy counters of one source, in microjoules, and where each wraps round
    (None: a counter that does not wrap in practice, NVML's 64-bit one)."""

    source: str
    uj: Mapping[str, int]
    wraps_at_uj: Mapping[str, int | None]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The machine at one instant, as this process sees it."""

    wall_ns: int  # time.time_ns(): when, for the stored events
    perf_ns: int  # time.perf_counter_ns(): how long, for the arithmetic
    own_cpu_ns: int  # time.process_time_ns(): every thread of this process
    cpus: tuple[int, ...]  # the CPUs this process may run on
    tick_s: float
    # time.thread_time_ns() of the thread that took the snapshot: a window begun and ended
    # on one thread (a served model's event loop) says what that thread itself used.
    thread_cpu_ns: int | None = None
    ticks: Mapping[int, CpuTicks] | None = None
    load_average: tuple[float, float, float] | None = None
    frequency_mhz: Mapping[int, float] | None = None
    throttle_count: int | None = None
    energy: EnergyCounters | None = None
    gpu_processes: frozenset[int] | None = None  # other processes on the measured GPU
    own_gpu_memory_bytes: int | None = None  # what this process holds on it (NVML)
    not_exposed: Mapping[str, str] = field(default_factory=dict)  # figure -> why not


# What a driver calls just before its timed loop; what that returns, just after it.
WindowWatch = Callable[[], Callable[[], MachineWindow]]


def window_between(before: Snapshot, after: Snapshot) -> MachineWindow:
    """The window from ``before`` to ``after``, two snapshots of the same process."""
    not_exposed = {**before.not_exposed, **after.not_exposed}
    busy = steal = resolution = None
    if before.ticks is not None and after.ticks is not None:
        cpus = [cpu for cpu in after.cpus if cpu in before.ticks and cpu in after.ticks]
        busy = sum(after.ticks[c].busy - before.ticks[c].busy for c in cpus) * after.tick_s
        steal = sum(after.ticks[c].steal - before.ticks[c].steal for c in cpus) * after.tick_s
        resolution = 2 * len(cpus) * after.tick_s
    frequencies = [
        mhz for snapshot in (before, after) for mhz in (snapshot.frequency_mhz or {}).values()
    ]
    throttles = (
        None
        if before.throttle_count is None or after.throttle_count is None
        else after.throttle_count - before.throttle_count
    )
    energy_j = _energy_j(before.energy, after.energy)
    if energy_j is None and before.energy is not None and "energy" not in not_exposed:
        not_exposed["energy"] = "the energy counters changed source during the window"
    gpu = (
        None
        if before.gpu_processes is None or after.gpu_processes is None
        else tuple(sorted(before.gpu_processes | after.gpu_processes))
    )
    device_memory = [
        held
        for held in (before.own_gpu_memory_bytes, after.own_gpu_memory_bytes)
        if held is not None
    ]
    return MachineWindow(
        started_at_ns=before.wall_ns,
        ended_at_ns=after.wall_ns,
        duration_ns=max(after.perf_ns - before.perf_ns, 0),
        cpus=max(len(after.cpus), 1),
        own_cpu_s=(after.own_cpu_ns - before.own_cpu_ns) / 1e9,
        thread_cpu_s=(
            None
            if before.thread_cpu_ns is None or after.thread_cpu_ns is None
            else max(after.thread_cpu_ns - before.thread_cpu_ns, 0) / 1e9
        ),
        busy_cpu_s=busy,
        steal_s=steal,
        resolution_s=resolution,
        load_average=after.load_average,
        frequency_mhz=(min(frequencies), max(frequencies)) if frequencies else None,
        throttle_events=throttles,
        energy_j=energy_j,
        energy_source=None if energy_j is None or after.energy is None else after.energy.source,
        gpu_processes=gpu,
        device_memory_bytes=max(device_memory) if device_memory else None,
        not_exposed=not_exposed,
    )


def _energy_j(before: EnergyCounters | None, after: EnergyCounters | None) -> float | None:
    if before is None or after is None or before.source != after.source:
        return None
    total_uj = 0
    for name, end in after.uj.items():
        start = before.uj.get(name)
        if start is None:
            return None
        delta = end - start
        if delta < 0:  # the counter wrapped round (once: a window is far shorter than a wrap)
            wraps_at = after.wraps_at_uj.get(name)
            if wraps_at is None:
                return None
            delta += wraps_at
        total_uj += delta
    return total_uj / 1e6
