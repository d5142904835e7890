"""LoadGen parity: dlscope's single-stream latencies against MLCommons LoadGen's, same callable.

Two callables. The zoo's squeezenet in ONNX Runtime (the graph shipped in the onnx wheel, one
intra-op thread, pre-built random inputs): the real case, whose p90 moves with whatever else
the machine runs. And a 2 ms sleep, nearly free of CPU contention, which isolates what the
two harnesses themselves add. Each round runs dlscope's driver and LoadGen's on the same
callable with the same settings, in alternating order, so drift of a shared machine
(frequency, neighbours) falls on both; many short rounds rather than a few long ones, so the
pairs are close in time. The figures are the medians over the rounds of the relative and the
absolute gaps (LoadGen minus dlscope) at p90 and p50. LoadGen's latency includes handing each
query to the worker thread and back (its issue callback holds the GIL), so a small positive
gap is expected.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.common import RESULTS
from shared.artifacts.sources import locate
from shared.manifests import ModelManifest, load_manifest
from shared.measurement import (
    RunQuery,
    SingleStream,
    WarmupSettings,
    run_scenario,
    summarize_result,
)
from shared.measurement.loadgen import run_loadgen

__all__ = ["run"]

MANIFEST = Path(__file__).resolve().parent.parent / "manifests" / "models" / "squeezenet.yaml"
LOGS = RESULTS / "loadgen_parity"  # LoadGen's own logs of each round, kept to inspect
SAMPLES = 8
# p90 needs 64 queries; 100 of squeezenet's ~10 ms make a run of ~1-2 s.
SQUEEZENET = SingleStream(
    min_query_count=100, min_duration_s=1.0, warmup=WarmupSettings(window_queries=8)
)
SLEEP = SingleStream(
    min_query_count=300, min_duration_s=0.5, warmup=WarmupSettings(window_queries=8)
)


async def run(
    squeezenet_rounds: int = 16, sleep_rounds: int = 10, *, logs: Path = LOGS
) -> dict[str, Any]:
    """``logs``: where LoadGen's own logs of each round are kept."""
    return await asyncio.to_thread(_measure, squeezenet_rounds, sleep_rounds, logs)


def _measure(squeezenet_rounds: int, sleep_rounds: int, logs: Path) -> dict[str, Any]:
    manifest = load_manifest(MANIFEST)
    assert isinstance(manifest, ModelManifest)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        str(locate(manifest.source.uri)), options, providers=["CPUExecutionProvider"]
    )
    spec = manifest.inputs[0]
    rng = np.random.default_rng(0)
    feeds = [{spec.name: rng.random(spec.shape, dtype=np.float32)} for _ in range(SAMPLES)]

    def squeezenet(indices: Sequence[int]) -> None:
        session.run(None, feeds[indices[0]])

    def sleep_2ms(_: Sequence[int]) -> None:
        time.sleep(0.002)

    return {
        "squeezenet": {
            "model": manifest.ref,
            "onnxruntime": ort.__version__,
            **_compare(logs / "squeezenet", squeezenet, SQUEEZENET, squeezenet_rounds),
        },
        "sleep_2ms": _compare(logs / "sleep_2ms", sleep_2ms, SLEEP, sleep_rounds),
        "loadgen_logs": str(logs),
        "targets": {"p90_relative_gap_abs": 0.03},
    }


def _compare(
    logs: Path, run_query: RunQuery, scenario: SingleStream, rounds: int
) -> dict[str, Any]:
    per_round = []
    for i in range(rounds):
        directory = logs / f"round-{i}"
        # Which goes first alternates, so a trend over the run favours neither.
        if i % 2 == 0:
            ours = _dlscope(run_query, scenario)
            theirs = _loadgen(run_query, scenario, directory)
        else:
            theirs = _loadgen(run_query, scenario, directory)
            ours = _dlscope(run_query, scenario)
        per_round.append(
            {
                "dlscope_p90_ms": ours[0],
                "loadgen_p90_ms": theirs[0],
                "dlscope_p50_ms": ours[1],
                "loadgen_p50_ms": theirs[1],
            }
        )

    def gaps(p: str) -> dict[str, Any]:
        relative = [r[f"loadgen_{p}_ms"] / r[f"dlscope_{p}_ms"] - 1 for r in per_round]
        absolute = [(r[f"loadgen_{p}_ms"] - r[f"dlscope_{p}_ms"]) * 1e3 for r in per_round]
        return {
            f"{p}_relative_gap_median": round(statistics.median(relative), 4),
            f"{p}_relative_gap_range": [round(min(relative), 4), round(max(relative), 4)],
            f"{p}_gap_us_median": round(statistics.median(absolute), 1),
        }

    return {"rounds": per_round, **gaps("p90"), **gaps("p50")}


def _dlscope(run_query: RunQuery, scenario: SingleStream) -> tuple[float, float]:
    """p90 and p50 in ms."""
    stats = summarize_result(run_scenario(scenario, run_query, sample_count=SAMPLES))[0]
    return stats.headline.value_ns / 1e6, stats.median.value_ns / 1e6


def _loadgen(run_query: RunQuery, scenario: SingleStream, directory: Path) -> tuple[float, float]:
    """p90 and p50 in ms, from LoadGen's summary."""
    result = run_loadgen(scenario, run_query, output_dir=directory, sample_count=SAMPLES)
    summary = result.phases[0].summary
    if summary["result"] != "VALID":
        raise RuntimeError(f"LoadGen judged the run {summary['result']}: see {directory}")
    return summary["percentile_latency_ns"] / 1e6, summary["50_00_percentile_latency_ns"] / 1e6
