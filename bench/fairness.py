"""The same model alone, and inside a four-framework experiment on this host.

What a user does: ``dlscope run digits-cnn -f onnxruntime`` beside ``dlscope run digits-cnn
--framework all``, before (``--concurrent``: the members measured at the same time on the
same cores, as every experiment was) and after (the default: each member holds the host's
CPU while it is measured, so they take turns). The three are alternated, round after round,
in one run of this benchmark, so that a drift of the machine hits all three alike; each
ratio is the experiment's ONNX Runtime member over the same model alone in that round.

The goal: after, p50 and p90 within 2 % of alone. Two fresh processes measuring the same
model alone differ by more than that on a small virtual machine (memory layout, thread
placement), so each round also runs the model alone a second time: the ratio of the two
alone runs is the noise floor the other ratios are read against.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import dlscope

__all__ = ["run"]

MODEL = "digits-cnn"
ROUNDS = int(os.environ.get("DLSCOPE_BENCH_ROUNDS", "3"))
# Batches of 32 for at least 2 s: thousands of queries a member, every percentile estimated.
SCENARIO = ["-b", "32", "-n", "400", "--min-duration", "2", "--warmup", "32"]
MODES = (
    "alone",
    "alone, again (noise floor)",
    "together, concurrent (before)",
    "together, one at a time (after)",
)


def _run_one(home: Path, scenario: list[str], *arguments: str) -> dict[str, Any]:
    result = Path(home) / "result.json"
    dlscope(home, "run", MODEL, *scenario, *arguments, "--json", str(result))
    document: dict[str, Any] = json.loads(result.read_text())
    return document


def _onnxruntime(document: dict[str, Any]) -> dict[str, float]:
    """The ONNX Runtime figures of a run: the evaluation's, or the experiment member's."""
    if "evaluation" in document:
        evaluation = document["evaluation"]
    else:
        evaluation = next(e for e in document["evaluations"] if e["framework"] == "onnxruntime")
    result = evaluation["result"]
    return {
        "p50_ms": result["p50_ms"],
        "p90_ms": result["p90_ms"],
        "p99_ms": result["p99_ms"],
        "throughput_per_s": result["throughput_per_s"],
        "verdict": result["verdict"]["status"] if result.get("verdict") else None,
    }


async def run(rounds: int = ROUNDS, *, scenario: list[str] | None = None) -> dict[str, Any]:
    """``rounds`` of the four modes, each ``dlscope run`` with ``scenario`` (``SCENARIO``)."""
    return await asyncio.to_thread(_measure, rounds, scenario or SCENARIO)


def _measure(count: int, scenario: list[str]) -> dict[str, Any]:
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="dlscope-bench-fairness-") as folder:
        home = Path(folder)

        def measured(*arguments: str) -> dict[str, float]:
            return _onnxruntime(_run_one(home, scenario, *arguments))

        _run_one(home, scenario, "-f", "onnxruntime")  # builds the zoo here; not measured
        for _ in range(count):
            figures = {
                MODES[0]: measured("-f", "onnxruntime"),
                MODES[1]: measured("-f", "onnxruntime"),
                MODES[2]: measured("--framework", "all", "--concurrent"),
                MODES[3]: measured("--framework", "all"),
            }
            rounds.append(figures)
    ratios = {
        mode: {
            figure: statistics.median(r[mode][figure] / r[MODES[0]][figure] for r in rounds)
            for figure in ("p50_ms", "p90_ms", "p99_ms", "throughput_per_s")
        }
        for mode in MODES[1:]
    }
    # Fresh processes alone spread widely, so also each mode's median over the rounds
    # against the median of every alone run (both per round), the steadier figure.
    pooled = {
        figure: statistics.median(r[mode][figure] for r in rounds for mode in MODES[:2])
        for figure in ("p50_ms", "p90_ms", "p99_ms", "throughput_per_s")
    }
    ratios_pooled = {
        mode: {
            figure: statistics.median(r[mode][figure] for r in rounds) / alone
            for figure, alone in pooled.items()
        }
        for mode in MODES[1:]
    }
    return {
        "model": MODEL,
        "scenario": " ".join(scenario),
        "rounds": rounds,
        "median_ratio_to_alone": ratios,
        "ratio_to_every_alone_run": ratios_pooled,
    }
