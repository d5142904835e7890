"""A language model across loads: output tokens/s and the token latencies at each load of a
sweep, and the Pareto chart the field draws (MLPerf Endpoints, AIPerf, vllm bench): the
system's output tokens/s against one user's, each point a load (or an experiment's member),
the frontier through the points no other beats on both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.gateway.ui.charts.base import PALETTE, Spec, chart

__all__ = ["ParetoPoint", "SweepCurvePoint", "pareto", "sweep_latency", "sweep_throughput"]


@dataclass(frozen=True)
class SweepCurvePoint:
    """One load's figures, as the curve draws them (None: not measured)."""

    level: float
    output_tokens_per_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    verdict: str | None


@dataclass(frozen=True)
class ParetoPoint:
    label: str
    per_user: float
    system: float
    frontier: bool


def _load_axis(points: Sequence[SweepCurvePoint], unit: str) -> Spec:
    levels = [p.level for p in points]
    # Loads that double (streams 1, 2, 4, … or rates) read evenly on a log axis.
    spread = max(levels) / min(levels) if levels and min(levels) > 0 else 1
    axis: Spec = {"field": "level", "type": "quantitative", "title": unit}
    if spread >= 8:
        axis["scale"] = {"type": "log", "base": 2}
        axis["title"] = f"{unit} (log scale)"
    return axis


def sweep_throughput(points: Sequence[SweepCurvePoint], unit: str) -> Spec:
    """Output tokens/s at each load; a load whose run was INVALID drawn hollow."""
    values = [
        {"level": p.level, "tokens": p.output_tokens_per_s, "verdict": p.verdict or "none"}
        for p in points
        if p.output_tokens_per_s is not None
    ]
    return chart(
        f"Output tokens per second at each load ({unit})",
        {
            "title": {"text": "Throughput by load", "subtitle": "hollow: the load was INVALID"},
            "data": {"values": values},
            "encoding": {
                "x": _load_axis(points, unit),
                "y": {"field": "tokens", "type": "quantitative", "title": "output tokens/s"},
                "tooltip": [
                    {"field": "level", "title": unit},
                    {"field": "tokens", "title": "output tokens/s", "format": ".4g"},
                    {"field": "verdict"},
                ],
            },
            "layer": [
                {"mark": {"type": "line", "color": PALETTE[2]}},
                {
                    "mark": {"type": "point", "size": 70, "color": PALETTE[2]},
                    "encoding": {
                        "fill": {
                            "condition": {
                                "test": "datum.verdict === 'INVALID'",
                                "value": "white",
                            },
                            "value": PALETTE[2],
                        }
                    },
                },
            ],
        },
    )


def sweep_latency(points: Sequence[SweepCurvePoint], unit: str, percentile: float) -> Spec:
    """The bounded percentile of TTFT and TPOT at each load, a line each."""
    label = f"p{percentile * 100:g}"
    values = [
        {"level": p.level, "metric": metric, "ms": ms}
        for p in points
        for metric, ms in ((f"{label} TTFT", p.ttft_ms), (f"{label} TPOT", p.tpot_ms))
        if ms is not None
    ]
    return chart(
        f"{label} time to first token and time per output token at each load ({unit})",
        {
            "title": {"text": "Token latency by load", "subtitle": "ms, log scale"},
            "data": {"values": values},
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": _load_axis(points, unit),
                "y": {
                    "field": "ms",
                    "type": "quantitative",
                    "title": "ms (log scale)",
                    "scale": {"type": "log"},
                },
                "color": {
                    "field": "metric",
                    "type": "nominal",
                    "title": "metric",
                    "scale": {"range": [PALETTE[0], PALETTE[1]]},
                },
                "tooltip": [
                    {"field": "level", "title": unit},
                    {"field": "metric"},
                    {"field": "ms", "format": ".4g"},
                ],
            },
        },
    )


def pareto(points: Sequence[ParetoPoint], what: str) -> Spec:
    """System output tokens/s against one user's (1000 / mean TPOT), each point labelled
    with ``what`` it is (a load, a framework); the frontier joins the points no other beats
    on both: up and right is better."""
    values = [
        {
            "label": p.label,
            "per_user": p.per_user,
            "system": p.system,
            "frontier": "on the frontier" if p.frontier else "beaten on both",
        }
        for p in points
    ]
    frontier = sorted((v for v in values if v["frontier"] == "on the frontier"), key=_per_user)
    x = {"field": "per_user", "type": "quantitative", "title": "output tokens/s per user"}
    y = {"field": "system", "type": "quantitative", "title": "output tokens/s, whole system"}
    return chart(
        f"Pareto chart: whole-system output tokens per second against one user's, per {what}",
        {
            "title": {
                "text": "Throughput against interactivity",
                "subtitle": f"each point a {what}; up and right is better",
            },
            "layer": [
                {
                    "data": {"values": frontier},
                    "mark": {"type": "line", "color": PALETTE[5], "strokeDash": [4, 3]},
                    "encoding": {"x": x, "y": y, "order": {"field": "per_user"}},
                },
                {
                    "data": {"values": values},
                    "mark": {"type": "point", "filled": True, "size": 80},
                    "encoding": {
                        "x": x,
                        "y": y,
                        "color": {
                            "field": "frontier",
                            "type": "nominal",
                            "title": None,
                            "scale": {
                                "domain": ["on the frontier", "beaten on both"],
                                "range": [PALETTE[5], "#9ca3af"],
                            },
                        },
                        "tooltip": [
                            {"field": "label", "title": what},
                            {"field": "per_user", "title": "tokens/s per user", "format": ".4g"},
                            {"field": "system", "title": "tokens/s, system", "format": ".4g"},
                        ],
                    },
                },
                {
                    "data": {"values": values},
                    "mark": {"type": "text", "dy": -10, "fontSize": 11},
                    "encoding": {"x": x, "y": y, "text": {"field": "label"}},
                },
            ],
        },
    )


def _per_user(value: dict[str, float | str]) -> float:
    return float(value["per_user"])
