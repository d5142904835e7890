"""An experiment: per-framework bars with intervals, every member's CDF, output parity."""

from __future__ import annotations

from collections.abc import Sequence

from services.gateway.ui.charts.base import Spec, cdf_axes, cdf_tooltip, chart, framework_colour
from shared.messages import EvaluationFigures

__all__ = ["framework_bars", "framework_cdf", "parity_heatmap"]


def framework_bars(rows: Sequence[Spec], *, measure: str, title: str, unit: str) -> Spec:
    """One bar per member (``label``) with its interval (``low``..``high``) where known.
    ``rows`` carry ``label``, ``framework``, ``value``, ``low`` and ``high``."""
    y = {"field": "label", "type": "nominal", "title": None, "sort": None}
    return chart(
        f"{title} per framework with 95% intervals",
        {
            "title": title,
            "data": {"values": list(rows)},
            "layer": [
                {
                    "mark": "bar",
                    "encoding": {
                        "y": y,
                        "x": {"field": "value", "type": "quantitative", "title": unit},
                        "color": {
                            **framework_colour(r["framework"] for r in rows),
                            "legend": None,
                        },
                        "tooltip": [
                            {"field": "label", "title": "member"},
                            {"field": "value", "title": measure, "format": ".4g"},
                            {"field": "low", "title": "interval from", "format": ".4g"},
                            {"field": "high", "title": "interval to", "format": ".4g"},
                        ],
                    },
                },
                {
                    "mark": {"type": "errorbar", "ticks": True, "color": "#111827"},
                    "encoding": {
                        "y": y,
                        "x": {"field": "low", "type": "quantitative", "title": unit},
                        "x2": {"field": "high"},
                    },
                },
                {
                    # The value beside its bar: a bar a hundred times shorter than the
                    # longest is a sliver, but its number still reads.
                    "mark": {"type": "text", "align": "left", "dx": 5, "fontSize": 11},
                    "encoding": {
                        "y": y,
                        "x": {"field": "high", "type": "quantitative"},
                        "text": {"field": "value", "type": "quantitative", "format": ",.4~r"},
                    },
                },
            ],
        },
        height=max(60, 28 * len(rows)),
    )


def framework_cdf(figures: Sequence[tuple[str, str, EvaluationFigures]]) -> Spec:
    """Every member's latency CDF (its first phase) on one chart; ``figures`` are
    (label, framework, figures) per member."""
    values = [
        {"member": label, "framework": framework, "latency": p.latency_ms, "fraction": p.fraction}
        for label, framework, drawn in figures
        if drawn.phases
        for p in drawn.phases[0].cdf
    ]
    return chart(
        "Cumulative distribution of query latency, one line per framework",
        {
            "title": "Latency CDF per framework",
            "data": {"values": values},
            "mark": {"type": "line", "interpolate": "step-after"},
            "encoding": {
                **cdf_axes("latency (ms, log scale)", "share of queries"),
                "color": framework_colour(str(v["framework"]) for v in values),
                "detail": {"field": "member", "type": "nominal"},
                "tooltip": cdf_tooltip({"field": "member"}),
            },
        },
    )


def parity_heatmap(cells: Sequence[Spec], order: Sequence[str]) -> Spec:
    """Pairs of members by their largest output difference relative to the reference's
    scale; ``cells`` carry ``reference``, ``candidate``, ``error``, ``agreement`` and
    ``verdict``; ``order`` lists the members, the same along both axes."""
    return chart(
        "Output parity between each pair of frameworks: largest relative difference",
        {
            "title": "Output parity (largest difference per unit of scale)",
            "data": {"values": list(cells)},
            "encoding": {
                "x": {
                    "field": "candidate",
                    "type": "nominal",
                    "title": None,
                    "sort": list(order),
                    "axis": {"labelAngle": 0, "orient": "top"},
                },
                "y": {"field": "reference", "type": "nominal", "title": None, "sort": list(order)},
            },
            "layer": [
                {
                    "mark": "rect",
                    "encoding": {
                        "color": {
                            "field": "error",
                            "type": "quantitative",
                            "title": "max error",
                            "scale": {"type": "symlog", "constant": 1e-7, "scheme": "oranges"},
                        },
                        "tooltip": [
                            {"field": "reference"},
                            {"field": "candidate"},
                            {"field": "error", "title": "max error", "format": ".2e"},
                            {"field": "agreement", "title": "top-1 agreement", "format": ".1%"},
                            {"field": "verdict"},
                        ],
                    },
                },
                {
                    "mark": {"type": "text", "fontSize": 11},
                    "encoding": {"text": {"field": "verdict"}},
                },
            ],
        },
        width=100 * max(2, len(order)),
        height=40 * max(2, len(order)),
    )
