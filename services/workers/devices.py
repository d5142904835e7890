"""Which device a worker measures, as a lease names it (``services.workers.leases``).

- a host's CPU: every core the worker may run on (``os.sched_getaffinity``: its affinity, as
  ``taskset`` sets it), one lock per core, ascending: ``cpu0-1``;
- a GPU: ``gpu<index>``, the first of ``CUDA_VISIBLE_DEVICES`` (0 without it);
- an OpenCL device, as the opencl worker describes it (``{"opencl": {"platform", "name",
  "device_type", …}}``): the CPU's cores when it is a CPU device (PoCL, and the FPGA flow
  emulated on one), else ``opencl-<platform>-<device>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigurationError

__all__ = ["Device", "cpu_device", "device_for", "worker_device"]


@dataclass(frozen=True)
class Device:
    """What a measurement holds: its name as people read it, and the locks it takes."""

    name: str  # cpu0-1, gpu0, opencl-portable-computing-language-cpu-…
    locks: tuple[str, ...]  # in the order they are taken: cpu0, cpu1; or the device's name


def cpu_device(cores: Iterable[int]) -> Device:
    """The CPU cores ``cores``, one lock each, ascending."""
    ordered = sorted(set(cores))
    if not ordered:
        raise ConfigurationError("a CPU lease needs at least one core")
    return Device(f"cpu{_ranges(ordered)}", tuple(f"cpu{core}" for core in ordered))


def _ranges(cores: list[int]) -> str:
    """0,1,2,5 -> "0-2,5"."""
    spans: list[list[int]] = []
    for core in cores:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unnamed"


def _gpu(visible: str | None) -> Device:
    """The GPU a CUDA framework uses first: CUDA_VISIBLE_DEVICES' first entry (an index, or
    a GPU-/MIG- UUID), 0 without it."""
    first = (visible or "").split(",")[0].strip()
    if not first:
        name = "gpu0"
    elif first.isdigit():
        name = f"gpu{int(first)}"
    else:
        name = f"gpu-{_slug(first)}"
    return Device(name, (name,))


def device_for(
    hardware: str, described: Mapping[str, Any], *, cores: Iterable[int], visible_gpus: str | None
) -> Device:
    """The device a worker on ``hardware`` measures, from what its framework process
    described (``described``: the OpenCL worker names its device there), the cores it may run
    on and ``CUDA_VISIBLE_DEVICES``."""
    opencl = described.get("opencl")
    if isinstance(opencl, Mapping):
        if opencl.get("device_type") == "cpu":  # PoCL; the FPGA flow emulated on the CPU
            return cpu_device(cores)
        name = f"opencl-{_slug(str(opencl.get('platform', '')))}-{_slug(str(opencl.get('name')))}"
        return Device(name, (name,))
    if hardware == "gpu":
        return _gpu(visible_gpus)
    return cpu_device(cores)


def worker_device(
    hardware: str, described: Mapping[str, Any], *, visible_gpus: str | None
) -> Device:
    """``device_for`` with the cores this process may run on now (its framework process
    inherits them)."""
    return device_for(hardware, described, cores=os.sched_getaffinity(0), visible_gpus=visible_gpus)
