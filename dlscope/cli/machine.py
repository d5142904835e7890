"""What a result cost and what else used the machine, as the command line shows them: rows
for ``dlscope run``'s summary, cells for the experiment table."""

from __future__ import annotations

from typing import Any

from shared.measurement.cost import RunCost

__all__ = ["cost_cells", "machine_rows", "memory_text", "run_cells"]

_MIB = 2**20


def memory_text(peak: dict[str, Any] | None) -> str:
    if peak is None:
        return "not measured"
    text = f"{peak['bytes'] / _MIB:.0f}"
    return text if peak["scope"] == "job" else f"{text} (since process start)"


def machine_rows(machine: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Rows of ``dlscope run``'s summary from a result's ``machine`` (JSON)."""
    if not machine:
        return []
    cost = machine["cost"]
    rows = []
    per_query = cost.get("cpu_s_per_query")
    rows.append(
        (
            "CPU per query (ms, all threads)",
            "not measured" if per_query is None else f"{per_query * 1e3:.3f}",
        )
    )
    rows.append(("peak memory (MiB, framework process)", memory_text(cost.get("peak_memory"))))
    device = cost.get("device_memory_bytes")
    device_why = cost.get("not_measured", {}).get("device_memory")
    if device is not None or device_why is not None:  # a GPU run
        rows.append(
            (
                "device memory (MiB, framework process on the GPU)",
                f"{device / _MIB:.0f}" if device is not None else device_why,
            )
        )
    energy = cost.get("energy_j_per_query")
    rows.append(
        (
            "energy per query (mJ)",
            f"{energy * 1e3:.3f} ({cost['energy_source']})"
            if energy is not None
            else cost.get("not_measured", {}).get("energy", "not measured"),
        )
    )
    several = len(machine.get("windows") or []) > 1
    for number, window in enumerate(machine.get("windows") or [], start=1):
        rows.extend(_window_rows(window, f"window {number}: " if several else "timed window: "))
    noise = machine.get("noise")
    if noise:
        shift = noise["after_ns"] / noise["before_ns"] - 1
        rows.append(
            (
                "noise probe before → after (ms)",
                f"{noise['before_ns'] / 1e6:.3f} → {noise['after_ns'] / 1e6:.3f} ({shift:+.1%})",
            )
        )
    return rows


def _window_rows(window: dict[str, Any], prefix: str) -> list[tuple[str, str]]:
    seconds = window["duration_ns"] / 1e9
    rows = []
    busy = window.get("busy_cpu_s")
    if busy is not None and seconds > 0:
        other = max(busy - window["own_cpu_s"], 0.0) / seconds
        margin = (window.get("resolution_s") or 0.0) / seconds
        rows.append(
            (
                f"{prefix}other processes (cores)",
                "too short a window to tell"
                if margin >= window["cpus"]
                else f"{other:.2f} of {window['cpus']}",
            )
        )
    if window.get("steal_s") is not None and seconds > 0:
        rows.append((f"{prefix}steal", f"{window['steal_s'] / (window['cpus'] * seconds):.1%}"))
    frequency = window.get("frequency_mhz")
    rows.append(
        (
            f"{prefix}CPU clock (MHz)",
            f"{frequency[0]:.0f}-{frequency[1]:.0f}"
            if frequency
            else window.get("not_exposed", {}).get("frequency", "not exposed"),
        )
    )
    return rows


def cost_cells(cost: RunCost | None) -> list[str]:
    """CPU ms per query and peak MiB, for the experiment table."""
    if cost is None:
        return ["-", "-"]
    per_query = "-" if cost.cpu_s_per_query is None else f"{cost.cpu_s_per_query * 1e3:.3f}"
    peak = cost.peak_memory
    memory = "-" if peak is None else f"{peak.bytes / _MIB:.0f}" + ("*" * (peak.scope != "job"))
    if cost.device_memory_bytes is not None:
        memory += f" +{cost.device_memory_bytes / _MIB:.0f} GPU"
    return [per_query, memory]


def run_cells(result: dict[str, Any]) -> list[str]:
    """CPU ms per query and the verdict (with its errors' codes) of one result (JSON), for
    the table of ``--repeat``: a run disturbed by another process says so."""
    cost = (result.get("machine") or {}).get("cost") or {}
    per_query = cost.get("cpu_s_per_query")
    verdict = result.get("verdict")
    if verdict is None:
        status = "-"
    else:
        errors = [r["code"] for r in verdict["reasons"] if r["severity"] == "error"]
        status = verdict["status"] + (f": {', '.join(errors)}" if errors else "")
    return ["-" if per_query is None else f"{per_query * 1e3:.3f}", status]
