"""What a result cost and what else used the machine while it was timed, as text: the rows
an evaluation's page, its HTML report and its Markdown report show, and the CSV's cells.
A figure the machine does not give is shown as not measured, with the reason, never as 0."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.measurement.cost import MachineReport, RunCost
from shared.measurement.noise import NoiseProbe
from shared.measurement.window import MachineWindow
from shared.messages import LatencySummary

__all__ = [
    "cost_columns",
    "cpu_text",
    "device_memory_text",
    "energy_text",
    "machine_info",
    "memory_text",
]

_MIB = 2**20


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def cpu_text(cost: RunCost) -> str:
    if cost.cpu_s_per_query is None:
        return cost.not_measured.get("cpu", "not measured")
    return f"{cost.cpu_s_per_query * 1e3:.4g} ms"


def memory_text(cost: RunCost, *, short: bool = False) -> str:
    """The peak; ``short``: for a table's cell, saying only where it is not the job's."""
    peak = cost.peak_memory
    if peak is None:
        return "not measured" if short else cost.not_measured.get("memory", "not measured")
    if short:  # a table's cell holds the device memory too; the page gives it a row
        since = " (since start)" if peak.scope != "job" else ""
        device = (
            ""
            if cost.device_memory_bytes is None
            else f" + {cost.device_memory_bytes / _MIB:,.0f} MiB on the GPU"
        )
        return f"{peak.bytes / _MIB:,.0f} MiB{since}{device}"
    since = "over the job" if peak.scope == "job" else "since the framework process started"
    return f"{peak.bytes / _MIB:,.0f} MiB {since}"


def device_memory_text(cost: RunCost) -> str | None:
    """On a GPU run: what the framework process held there, or why that is not known."""
    if cost.device_memory_bytes is not None:
        return (
            f"{cost.device_memory_bytes / _MIB:,.0f} MiB held by the framework process on the "
            "GPU at the timed window's ends (NVML)"
        )
    return cost.not_measured.get("device_memory")


def energy_text(cost: RunCost) -> str:
    if cost.energy_j_per_query is None:
        return cost.not_measured.get("energy", "not measured")
    return f"{cost.energy_j_per_query * 1e3:.4g} mJ ({cost.energy_source})"


def _cost_rows(cost: RunCost, load_ms: float) -> list[tuple[str, str]]:
    per_query = cpu_text(cost)
    if cost.cpu_s is not None:
        per_query += (
            f" of CPU, every thread of the framework process ({cost.cpu_s:.3g} s over "
            f"{cost.queries:,} queries of {cost.samples_per_query})"
        )
    peak = memory_text(cost)
    if cost.peak_memory is not None:
        peak += f" ({cost.peak_memory.method})"
    device = device_memory_text(cost)
    return [
        ("CPU per query", per_query),
        ("peak memory", peak),
        *([("device memory", device)] if device is not None else []),
        ("energy per query", energy_text(cost)),
        ("model load", f"{load_ms:.4g} ms"),
    ]


def _window_rows(window: MachineWindow) -> list[tuple[str, str]]:
    rows = [
        (
            "measured",
            f"{_when(window.started_at_ns)} to {_when(window.ended_at_ns)} UTC "
            f"({window.duration_s:.3g} s)",
        )
    ]
    cores, margin = window.other_cores, window.other_cores_resolution
    rows.append(
        (
            "other processes",
            window.not_exposed.get("cpu_time", "not measured")
            if cores is None
            else f"too short a window to tell ({window.duration_s * 1e3:.3g} ms; /proc/stat counts "
            "in ticks of 10 ms)"
            if margin is not None and margin >= window.cpus
            else f"{cores:.2f} of {window.cpus} cores ({cores / window.cpus:.0%} of their time"
            + (f", ± {margin:.2f}" if margin else "")
            + "); the measuring process used "
            + f"{window.own_cpu_s / window.duration_s if window.duration_s else 0:.2f} cores",
        )
    )
    steal = window.steal_share
    if steal is not None:
        rows.append(("steal", f"{steal:.1%} of these CPUs' time"))
    if window.load_average is not None:
        rows.append(
            ("load average", " / ".join(f"{v:.2f}" for v in window.load_average) + " at the end")
        )
    clock = window.frequency_mhz
    rows.append(
        (
            "CPU clock",
            f"{clock[0]:.0f}-{clock[1]:.0f} MHz"
            if clock
            else window.not_exposed.get("frequency", "not exposed"),
        )
    )
    rows.append(
        (
            "thermal throttling",
            f"{window.throttle_events} events"
            if window.throttle_events is not None
            else window.not_exposed.get("throttling", "not exposed"),
        )
    )
    if window.gpu_processes is not None or "gpu" in window.not_exposed:
        rows.append(
            (
                "other GPU processes",
                window.not_exposed["gpu"]
                if window.gpu_processes is None
                else ", ".join(f"pid {pid}" for pid in window.gpu_processes) or "none",
            )
        )
    rows.append(
        (
            "energy",
            f"{window.energy_j:.4g} J ({window.energy_source})"
            if window.energy_j is not None
            else window.not_exposed.get("energy", "not measured"),
        )
    )
    return rows


def _noise_text(noise: NoiseProbe) -> str:
    return (
        f"{noise.before_ns / 1e6:.3f} ms before the warm-up, {noise.after_ns / 1e6:.3f} ms after "
        f"the timed queries ({noise.shift:+.1%}; {noise.workload})"
    )


def machine_info(summary: LatencySummary | None) -> dict[str, Any] | None:
    """The cost rows, each timed window's rows (labelled by batch size in a sweep) and the
    noise probe, as (label, text) pairs; None for a result from before they were recorded."""
    if summary is None or summary.machine is None:
        return None
    machine: MachineReport = summary.machine
    sizes = [s.samples_per_query for s in summary.statistics]
    several = len(machine.windows) > 1
    return {
        "cost": _cost_rows(machine.cost, summary.load_ms),
        "windows": [
            (
                f"batch size {sizes[i]}" if several and i < len(sizes) else "",
                _window_rows(window),
            )
            for i, window in enumerate(machine.windows)
        ],
        "noise": None if machine.noise is None else _noise_text(machine.noise),
    }


def cost_columns(summary: LatencySummary) -> dict[str, Any]:
    """The CSV report's cost and window cells of one result (the headline window's)."""
    machine = summary.machine
    if machine is None:
        return {}
    cost = machine.cost
    window = machine.windows[0] if machine.windows else None
    peak = cost.peak_memory
    return {
        "cpu_s_per_query": cost.cpu_s_per_query,
        "peak_memory_bytes": None if peak is None else peak.bytes,
        "peak_memory_scope": None if peak is None else peak.scope,
        "device_memory_bytes": cost.device_memory_bytes,
        "energy_j_per_query": cost.energy_j_per_query,
        "energy_note": cost.energy_source or cost.not_measured.get("energy", ""),
        "other_cores": None if window is None else window.other_cores,
        "cpus": None if window is None else window.cpus,
        "steal_share": None if window is None else window.steal_share,
        "noise_probe_shift": None if machine.noise is None else machine.noise.shift,
        "window_started_at": None if window is None else _when(window.started_at_ns),
        "window_ended_at": None if window is None else _when(window.ended_at_ns),
    }
