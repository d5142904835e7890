"""Reading the machine for a timed window's snapshots (``window``): /proc, /sys and NVML.

Each reading is what Linux exposes to an unprivileged process; where it exposes nothing (most
VMs have no cpufreq, no thermal_throttle, no powercap; RAPL's counters are often readable by
root only) the snapshot says so in ``not_exposed``, and the window carries that on, so a
figure is either measured or said to be missing, never guessed. NVML (``nvidia-ml-py``) is
imported only when a GPU is measured.

A snapshot costs about 0.1-0.2 ms on a 2-core VM (a few small files, and the ones that are
not there); it is taken just before and just after a timed loop, never inside one.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from shared.measurement.window import (
    EnergyCounters,
    MachineWindow,
    Snapshot,
    parse_proc_stat,
    window_between,
)

__all__ = ["MachineWatch", "own_and_others", "rapl_counters"]

log = logging.getLogger(__name__)

_PROC_STAT = Path("/proc/stat")
_CPUS = Path("/sys/devices/system/cpu")
_POWERCAP = Path("/sys/class/powercap")


class MachineWatch:
    """Snapshots of the machine around timed windows; ``gpu_index`` is the GPU measured
    (None: a CPU run, no GPU looked at). Call it to begin a window: it returns what to call
    at the window's end (``WindowWatch``)."""

    def __init__(
        self,
        *,
        gpu_index: int | None = None,
        root: Path = Path("/"),
        measured: Sequence[psutil.Process] = (),
    ) -> None:
        self._gpu_index = gpu_index
        self._root = root
        # Processes whose CPU time is the measurement's own besides this one's: a local
        # server that an endpoint worker measures (and its children) is the system under
        # test, not another process competing with it.
        self._measured = tuple(measured)
        self._tick_s = 1 / os.sysconf("SC_CLK_TCK")
        self._nvml: Any = None
        self._nvml_why: str | None = None

    def __call__(self) -> Callable[[], MachineWindow]:
        before = self.snapshot()

        def end() -> MachineWindow:
            return window_between(before, self.snapshot())

        return end

    def snapshot(self) -> Snapshot:
        # The clocks first, at the loop's edge; the slower files after.
        perf_ns = time.perf_counter_ns()
        own_ns = time.process_time_ns()
        thread_ns = time.thread_time_ns()
        wall_ns = time.time_ns()
        # After the clocks: finding a local server's children walks /proc.
        own_ns += self._measured_cpu_ns()
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        not_exposed: dict[str, str] = {}
        ticks = None
        try:
            ticks = parse_proc_stat(self._path(_PROC_STAT).read_text(), cpus)
        except (OSError, ValueError) as exc:
            not_exposed["cpu_time"] = f"/proc/stat not readable: {exc}"
        frequencies = self._frequencies(cpus, not_exposed)
        throttles = self._throttles(cpus, not_exposed)
        energy = self._energy(not_exposed)
        gpu, gpu_memory = self._gpu_processes(not_exposed)
        return Snapshot(
            wall_ns=wall_ns,
            perf_ns=perf_ns,
            own_cpu_ns=own_ns,
            thread_cpu_ns=thread_ns,
            cpus=cpus,
            tick_s=self._tick_s,
            ticks=ticks,
            load_average=os.getloadavg(),
            frequency_mhz=frequencies,
            throttle_count=throttles,
            energy=energy,
            gpu_processes=gpu,
            own_gpu_memory_bytes=gpu_memory,
            not_exposed=not_exposed,
        )

    def _measured_cpu_ns(self) -> int:
        total = 0.0
        for process in self._measured:
            try:
                for one in (process, *process.children(recursive=True)):
                    times = one.cpu_times()
                    total += times.user + times.system
            except psutil.Error:
                continue  # it exited: its time so far is what it was
        return int(total * 1e9)

    def _path(self, path: Path) -> Path:
        return self._root / path.relative_to("/")

    def _frequencies(self, cpus: tuple[int, ...], why: dict[str, str]) -> dict[int, float] | None:
        found = {}
        for cpu in cpus:
            try:
                khz = (self._path(_CPUS) / f"cpu{cpu}/cpufreq/scaling_cur_freq").read_text()
                found[cpu] = int(khz) / 1000
            except (OSError, ValueError):
                continue
        if not found:
            why["frequency"] = "not exposed (no cpufreq in /sys/devices/system/cpu)"
            return None
        return found

    def _throttles(self, cpus: tuple[int, ...], why: dict[str, str]) -> int | None:
        total, seen = 0, False
        for cpu in cpus:
            folder = self._path(_CPUS) / f"cpu{cpu}/thermal_throttle"
            for name in ("core_throttle_count", "package_throttle_count"):
                try:
                    total += int((folder / name).read_text())
                    seen = True
                except (OSError, ValueError):
                    continue
        if not seen:
            why["throttling"] = "not exposed (no thermal_throttle in /sys/devices/system/cpu)"
            return None
        return total

    def _energy(self, why: dict[str, str]) -> EnergyCounters | None:
        if self._gpu_index is not None:
            counters = self._nvml_energy(why)
            if counters is not None:
                return counters
        counters, reason = rapl_counters(self._path(_POWERCAP))
        if counters is None:
            why.setdefault("energy", reason)
        return counters

    def _nvml_handle(self, why: dict[str, str]) -> Any:
        """NVML's handle of the measured GPU, or None with the reason in ``why``."""
        if self._nvml_why is not None:
            why["gpu"] = self._nvml_why
            return None
        if self._nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
                nvml.nvmlInit()
            except Exception as exc:  # ImportError, or NVMLError: no driver loaded
                self._nvml_why = f"NVML not available: {exc}"
                why["gpu"] = self._nvml_why
                return None
            self._nvml = nvml
        return self._nvml.nvmlDeviceGetHandleByIndex(self._gpu_index)

    def _nvml_energy(self, why: dict[str, str]) -> EnergyCounters | None:
        try:
            handle = self._nvml_handle(why)
            if handle is None:
                return None
            mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception as exc:  # NVMLError_NotSupported before Volta, a GPU gone
            why["gpu_energy"] = f"NVML gives no energy counter for GPU {self._gpu_index}: {exc}"
            return None
        name = f"gpu{self._gpu_index}"
        return EnergyCounters(
            source=f"NVML total energy, GPU {self._gpu_index}",
            uj={name: mj * 1000},
            wraps_at_uj={name: None},
        )

    def _gpu_processes(self, why: dict[str, str]) -> tuple[frozenset[int] | None, int | None]:
        """The other processes on the measured GPU, and the device memory this process holds
        there (NVML's ``usedGpuMemory``; None where the driver does not say, e.g. in some
        containers)."""
        if self._gpu_index is None:
            return None, None
        try:
            handle = self._nvml_handle(why)
            if handle is None:
                return None, None
            processes = [
                process
                for query in (
                    self._nvml.nvmlDeviceGetComputeRunningProcesses,
                    self._nvml.nvmlDeviceGetGraphicsRunningProcesses,
                )
                for process in query(handle)
            ]
        except Exception as exc:
            why["gpu"] = f"NVML could not list the processes on GPU {self._gpu_index}: {exc}"
            return None, None
        return own_and_others(processes, os.getpid(), why)


def own_and_others(
    processes: Iterable[Any], own: int, why: dict[str, str]
) -> tuple[frozenset[int], int | None]:
    """From NVML's process entries on a GPU: every other process, and the device memory
    ``own`` holds (the largest entry: it may be listed as compute and as graphics)."""
    memory = [
        int(process.usedGpuMemory)
        for process in processes
        if int(process.pid) == own and getattr(process, "usedGpuMemory", None) is not None
    ]
    if not memory:
        why["device_memory"] = (
            "not measured: NVML does not give this process's device memory on this GPU"
        )
    others = frozenset(int(process.pid) for process in processes) - {own}
    return others, max(memory) if memory else None


def rapl_counters(powercap: Path) -> tuple[EnergyCounters | None, str]:
    """The package-level RAPL counters (``intel-rapl:N``; their subdomains are inside them),
    or None and why not: absent (most VMs), or not readable (root only since 2020)."""
    if not powercap.is_dir():
        return None, f"not measured: {powercap} does not exist (no RAPL here)"
    packages = sorted(p for p in powercap.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not packages:
        return None, f"not measured: no RAPL package domain under {powercap}"
    uj: dict[str, int] = {}
    wraps: dict[str, int | None] = {}
    for package in packages:
        try:
            uj[package.name] = int((package / "energy_uj").read_text())
            wraps[package.name] = int((package / "max_energy_range_uj").read_text())
        except PermissionError:
            return None, (
                f"not measured: {package / 'energy_uj'} is readable by root only "
                "(chmod it, or run the worker with the right to read it)"
            )
        except (OSError, ValueError) as exc:
            return None, f"not measured: {package / 'energy_uj'}: {exc}"
    names = ", ".join(uj)
    return EnergyCounters(source=f"RAPL package ({names})", uj=uj, wraps_at_uj=wraps), ""
