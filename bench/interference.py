"""Interference detection: what its snapshots cost, how often a quiet run is flagged, and how
often a run with CPU hogs is caught.

overhead: in one process, the worker's own measuring path (``run_scenario`` around the
    predictor's ``predict``, as services/workers/framework/sessions/inference.py runs it) with the
    timed window's snapshots on and off, alternated block by block (on-off, then off-on, so drift
    hits both alike); the figure is the median over rounds of p50(on) / p50(off), with its
    95 % bootstrap interval, for squeezenet (milliseconds) and digits-cnn (tens of µs), plus
    what one snapshot costs. Goal: within 0.5 % of 1.
detection: ``dlscope run squeezenet`` as a user runs it, ``QUIET_RUNS`` times on a quiet
    machine (each not-VALID verdict that names interference is a false alarm; a warning about
    the noise probe is counted apart) and
    ``HOG_RUNS`` times with one busy-looping process per CPU started a second into the timed
    window (read from the run's progress lines; each verdict naming
    ``other_processes_used_cpu`` is a detection). Every run's measured other-process cores,
    steal and noise-probe shift are kept, so the thresholds can be read against them.

Quiet means quiet: run it with nothing else on the machine. Each run waits for a second in
which the machine was at most 5 % busy, and keeps that share and the load average beside its
figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import digits_manifests, median_ci95, percentiles
from dlscope.cli.live import parse_line
from dlscope.cli.outcome import COMPLETED
from harness.quiet import wait_until_quiet
from services.workers.framework.frameworks import framework_for
from services.workers.framework.sessions.inputs import synthetic_inputs
from shared.artifacts import ArtifactCache
from shared.config import REPOSITORY_ROOT
from shared.manifests import ModelManifest, load_manifest
from shared.measurement import SingleStream, ValidityThresholds, WarmupSettings, run_scenario
from shared.measurement.readings import MachineWatch

__all__ = ["Scale", "run"]

QUIET_RUNS = int(os.environ.get("DLSCOPE_BENCH_QUIET_RUNS", "20"))
HOG_RUNS = int(os.environ.get("DLSCOPE_BENCH_HOG_RUNS", "10"))
OVERHEAD_ROUNDS = int(os.environ.get("DLSCOPE_BENCH_ROUNDS", "40"))
# Each run: 64 queries at least, 3 s of them; the hogs start 1 s in.
RUN = ["squeezenet", "-n", "64", "--min-duration", "3"]
HOG_DELAY_S = 1.0
INTERFERENCE = {
    "other_processes_used_cpu",
    "cpu_steal",
    "cpu_throttled",
    "other_gpu_processes",
    "noise_probe_shifted",
}
NO_WARMUP = WarmupSettings(max_windows=0)
# How long a run waits for a quiet machine before it starts anyway (harness.quiet).
PATIENCE_S = 900.0


@dataclass(frozen=True)
class Scale:
    """How much of each part runs; the defaults are the benchmark's (and its environment
    variables'), tests/bench runs one of each."""

    quiet_runs: int = QUIET_RUNS
    hog_runs: int = HOG_RUNS
    overhead_rounds: int = OVERHEAD_ROUNDS
    patience_s: float = PATIENCE_S
    run: tuple[str, ...] = tuple(RUN)


async def run(scale: Scale | None = None, *, zoo: Path | None = None) -> dict[str, Any]:
    """Both parts at ``scale`` (``Scale()``); ``zoo``: a folder where ``build_digits`` has
    built the digits CNN already (built into a temporary folder otherwise)."""
    scale = scale or Scale()
    before = os.getloadavg()
    overhead = await asyncio.to_thread(_overhead, scale, zoo)
    detection = await asyncio.to_thread(_detection, scale)
    return {
        "cpu": _cpu_model(),
        "thresholds": ValidityThresholds().model_dump(
            include={"max_other_cpu_share", "max_steal_share", "max_noise_shift"}
        ),
        "overhead": overhead,
        "detection": detection,
        "load_average_1m": {"before": before[0], "after": os.getloadavg()[0]},
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# --- overhead -------------------------------------------------------------------------------


def _overhead(scale: Scale, zoo: Path | None) -> dict[str, Any]:
    busy_before = wait_until_quiet(patience_s=scale.patience_s)
    watch = MachineWatch()
    snapshot_us = _snapshot_cost_us(watch)
    results: dict[str, Any] = {"machine_busy_before": busy_before, "snapshot_us": snapshot_us}
    with tempfile.TemporaryDirectory(prefix="dlscope-interference-") as folder:
        artifacts = ArtifactCache(Path(folder) / "artifacts")
        digits = digits_manifests(zoo or Path(folder) / "zoo")["onnxruntime"]
        squeezenet = load_manifest(REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml")
        assert isinstance(squeezenet, ModelManifest)
        for name, manifest, per_block in (
            ("squeezenet", squeezenet, 40),
            ("digits-cnn", digits, 400),
        ):
            path = artifacts.fetch(manifest.source)
            results[name] = _alternate(manifest, path, watch, per_block, scale.overhead_rounds)
    return results


def _snapshot_cost_us(watch: MachineWatch, count: int = 1000) -> dict[str, float]:
    times = []
    for _ in range(count):
        start = time.perf_counter_ns()
        watch.snapshot()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return {"median": statistics.median(times), "p99": float(np.percentile(times, 99))}


def _alternate(
    manifest: ModelManifest, path: Path, watch: MachineWatch, per_block: int, rounds: int
) -> dict[str, Any]:
    predictor = framework_for("onnxruntime").create()
    predictor.open(manifest, path, hardware="cpu")
    try:
        inputs = synthetic_inputs(manifest, batch_size=1, seed=0)
        predict = predictor.predict

        def query(_: object) -> object:
            return predict(inputs)

        block = SingleStream(min_query_count=per_block, min_duration_s=0, warmup=NO_WARMUP)
        run_scenario(block, query)  # warm: caches, allocators, thread pools
        arms: dict[str, list[int]] = {"on": [], "off": []}
        paired: list[tuple[float, float]] = []
        for number in range(rounds):
            order = ("on", "off") if number % 2 == 0 else ("off", "on")
            medians = {}
            for arm in order:
                result = run_scenario(block, query, watch=watch if arm == "on" else None)
                latencies = list(result.phases[0].latencies_ns)
                arms[arm] += latencies
                medians[arm] = statistics.median(latencies)
            paired.append((medians["on"], medians["off"]))
    finally:
        predictor.close()
    ratios = [on / off for on, off in paired]
    return {
        "rounds": rounds,
        "queries_per_block": per_block,
        "on": percentiles([ns / 1e6 for ns in arms["on"]]),
        "off": percentiles([ns / 1e6 for ns in arms["off"]]),
        "median_round_p50_ratio": statistics.median(ratios),
        "median_round_p50_ratio_ci95": median_ci95(ratios),
    }


# --- detection ------------------------------------------------------------------------------


def _detection(scale: Scale) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dlscope-interference-") as home:
        quiet = [_one_run(Path(home), n, scale, hogs=0) for n in range(scale.quiet_runs)]
        cpus = len(os.sched_getaffinity(0))
        hogged = [_one_run(Path(home), n, scale, hogs=cpus) for n in range(scale.hog_runs)]
    false_alarms = [r for r in quiet if r["flagged"]]
    warned = [r for r in quiet if r["warned"]]
    caught = [r for r in hogged if "other_processes_used_cpu" in r["codes"]]
    return {
        "command": "dlscope run " + " ".join(scale.run),
        "quiet": {
            "runs": len(quiet),
            "false_alarms": len(false_alarms),
            "false_alarm_rate": len(false_alarms) / len(quiet) if quiet else None,
            "warned": len(warned),
            "other_cores_max": max((r["other_cores"] for r in quiet), default=None),
            "noise_shift_max_abs": max((abs(r["noise_shift"]) for r in quiet), default=None),
            "each": quiet,
        },
        "hogged": {
            "hogs": len(os.sched_getaffinity(0)),
            "started_s_into_window": HOG_DELAY_S,
            "runs": len(hogged),
            "detected": len(caught),
            "detection_rate": len(caught) / len(hogged) if hogged else None,
            "other_cores_min": min((r["other_cores"] for r in hogged), default=None),
            "each": hogged,
        },
    }


def _one_run(home: Path, number: int, scale: Scale, *, hogs: int) -> dict[str, Any]:
    """One ``dlscope run``, with ``hogs`` busy loops started a second into its timed window."""
    result = home / f"run-{hogs}-{number}.json"
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")},
        "DLSCOPE_HOME": str(home),
        "DLSCOPE_PROGRESS": "lines",
    }
    busy_before = wait_until_quiet(patience_s=scale.patience_s)
    load = os.getloadavg()[0]
    started: list[subprocess.Popen[bytes]] = []
    with subprocess.Popen(
        [sys.executable, "-m", "dlscope", "run", *scale.run, "--json", str(result)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stderr is not None
            for line in child.stderr:
                event = parse_line(line)
                if (
                    hogs
                    and not started
                    and event is not None
                    and event[1].get("part") == "timed queries"
                ):
                    time.sleep(HOG_DELAY_S)
                    started = [
                        subprocess.Popen([sys.executable, "-c", "while True: pass"])
                        for _ in range(hogs)
                    ]
        finally:
            for process in started:
                process.kill()
                process.wait()
    # The hogs make a run INVALID (exit 3): that verdict is what this benchmark measures.
    if child.returncode not in COMPLETED:
        raise RuntimeError(f"dlscope run failed ({child.returncode})")
    document = json.loads(result.read_text())
    outcome = document["evaluation"]["result"]
    machine = outcome["machine"]
    window = machine["windows"][0]
    seconds = window["duration_ns"] / 1e9
    reasons = outcome["verdict"]["reasons"]
    codes = sorted({r["code"] for r in reasons})
    errors = {r["code"] for r in reasons if r["severity"] == "error"}
    warnings = {r["code"] for r in reasons if r["severity"] == "warning"}
    noise = machine["noise"]
    return {
        "machine_busy_before": busy_before,
        "load_1m_before": load,
        "status": outcome["verdict"]["status"],
        "codes": codes,
        "flagged": bool(INTERFERENCE & errors),  # not VALID because of interference
        "warned": sorted(INTERFERENCE & warnings),
        "other_cores": max(window["busy_cpu_s"] - window["own_cpu_s"], 0.0) / seconds,
        "own_cores": window["own_cpu_s"] / seconds,
        "steal_share": window["steal_s"] / (window["cpus"] * seconds),
        "window_s": seconds,
        "noise_shift": noise["after_ns"] / noise["before_ns"] - 1,
        "p50_ms": outcome["p50_ms"],
        "p90_ms": outcome["p90_ms"],
        "cpu_ms_per_query": machine["cost"]["cpu_s_per_query"] * 1e3,
    }
