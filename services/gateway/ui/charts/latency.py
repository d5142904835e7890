"""One evaluation's latency: histogram, CDF, latency over the query index, the warm-up,
the layer breakdown."""

from __future__ import annotations

from collections.abc import Sequence

from services.gateway.ui.charts.base import PALETTE, Spec, cdf_axes, cdf_tooltip, chart
from shared.messages import LayerShare, PhaseFigures, WarmupFigure

__all__ = ["cdf", "histogram", "layers", "series", "warmup"]


def histogram(phase: PhaseFigures, *, title: str = "") -> Spec:
    """Latency histogram of one phase; queries beyond a cut-off tail are said in the title."""
    values = [{"low": b.low_ms, "high": b.high_ms, "count": b.count} for b in phase.histogram]
    subtitle = (
        f"{phase.above_count} slowest queries beyond {phase.above_ms:.3g} ms not shown"
        if phase.above_ms is not None and phase.above_count
        else f"{phase.count} timed queries"
    )
    return chart(
        f"Histogram of {phase.count} query latencies{title}",
        {
            "title": {"text": f"Latency histogram{title}", "subtitle": subtitle},
            "data": {"values": values},
            "mark": {"type": "bar", "color": PALETTE[0], "binSpacing": 1},
            "encoding": {
                "x": {
                    "field": "low",
                    "type": "quantitative",
                    "bin": {"binned": True},
                    "title": "latency (ms)",
                },
                "x2": {"field": "high"},
                "y": {"field": "count", "type": "quantitative", "title": "queries"},
                "tooltip": [
                    {"field": "low", "title": "from ms", "format": ".4g"},
                    {"field": "high", "title": "to ms", "format": ".4g"},
                    {"field": "count", "title": "queries"},
                ],
            },
        },
    )


def cdf(phases: Sequence[PhaseFigures], *, title: str = "") -> Spec:
    """Empirical CDF of latency, one line per batch size."""
    values = [
        {"latency": p.latency_ms, "fraction": p.fraction, "batch": phase.batch_size}
        for phase in phases
        for p in phase.cdf
    ]
    encoding: Spec = {
        **cdf_axes("latency (ms, log scale)", "share of queries at most this long"),
        "tooltip": cdf_tooltip(),
    }
    if len(phases) > 1:  # a sweep: one line per batch size
        encoding["color"] = {"field": "batch", "type": "ordinal", "title": "batch size"}
    return chart(
        f"Cumulative distribution of query latency{title}",
        {
            "title": f"Latency CDF{title}",
            "data": {"values": values},
            "mark": {"type": "line", "interpolate": "step-after", "color": PALETTE[0]},
            "encoding": encoding,
        },
    )


def series(phase: PhaseFigures, *, title: str = "") -> Spec:
    """Latency over the query index: the median per bucket, the band its least..greatest."""
    values = [
        {"index": p.index, "latency": p.latency_ms, "low": p.low_ms, "high": p.high_ms}
        for p in phase.series
    ]
    per = "each query" if phase.bucket == 1 else f"median, least and greatest of {phase.bucket}"
    x = {"field": "index", "type": "quantitative", "title": "query index (issue order)"}
    return chart(
        f"Latency of every timed query in issue order{title}",
        {
            "title": {"text": f"Latency over the run{title}", "subtitle": per},
            "data": {"values": values},
            "layer": [
                {
                    "mark": {"type": "area", "opacity": 0.25, "color": PALETTE[0]},
                    "encoding": {
                        "x": x,
                        "y": {
                            "field": "low",
                            "type": "quantitative",
                            "title": "latency (ms, log scale)",
                            # Spikes hundreds of times the median stay visible without
                            # flattening the median's line.
                            "scale": {"type": "log", "nice": False},
                        },
                        "y2": {"field": "high"},
                    },
                },
                {
                    "mark": {"type": "line", "color": PALETTE[0], "strokeWidth": 1},
                    "encoding": {
                        "x": x,
                        "y": {
                            "field": "latency",
                            "type": "quantitative",
                            "scale": {"type": "log", "nice": False},
                        },
                        "tooltip": [
                            {"field": "index", "title": "query"},
                            {"field": "latency", "title": "median ms", "format": ".4g"},
                            {"field": "low", "title": "least ms", "format": ".4g"},
                            {"field": "high", "title": "greatest ms", "format": ".4g"},
                        ],
                    },
                },
            ],
        },
    )


def warmup(figure: WarmupFigure) -> Spec:
    """The warm-up queries in order, and the window medians that ended it."""
    values = [{"index": i * figure.every, "latency": v} for i, v in enumerate(figure.latencies_ms)]
    medians = [
        {"index": (i + 1) * figure.window_queries, "median": m}
        for i, m in enumerate(figure.window_medians_ms)
    ]
    x = {"field": "index", "type": "quantitative", "title": "warm-up query"}
    return chart(
        "Warm-up query latencies, with the median of each window",
        {
            "title": {
                "text": "Warm-up",
                "subtitle": f"ended by: {figure.decided_by}"
                + ("" if figure.steady else " (never steady)"),
            },
            "layer": [
                {
                    "data": {"values": values},
                    "mark": {"type": "line", "color": PALETTE[4], "strokeWidth": 1},
                    "encoding": {
                        "x": x,
                        "y": {"field": "latency", "type": "quantitative", "title": "latency (ms)"},
                        "tooltip": [
                            {"field": "index", "title": "query"},
                            {"field": "latency", "title": "ms", "format": ".4g"},
                        ],
                    },
                },
                {
                    "data": {"values": medians},
                    "mark": {"type": "point", "filled": True, "color": PALETTE[5]},
                    "encoding": {
                        "x": x,
                        "y": {"field": "median", "type": "quantitative"},
                        "tooltip": [
                            {"field": "index", "title": "window ends at query"},
                            {"field": "median", "title": "window median ms", "format": ".4g"},
                        ],
                    },
                },
            ],
        },
        height=160,
    )


def layers(shares: Sequence[LayerShare], *, top: int = 20) -> Spec:
    """The slowest layers by their typical time per query (median call times calls per query,
    ``shared.breakdown.per_query_ns``: one cold call does not lead it), coloured by
    operator type; in the order ``dlscope layers`` lists them."""
    values = [
        {"layer": s.node, "op": s.op_type, "ms": s.duration_ms, "share": s.share}
        for s in shares[:top]
    ]
    return chart(
        f"The {len(values)} slowest layers by median time per query",
        {
            "title": "Layer breakdown (slowest first)",
            "data": {"values": values},
            "mark": "bar",
            "encoding": {
                "y": {"field": "layer", "type": "nominal", "sort": "-x", "title": None},
                "x": {"field": "ms", "type": "quantitative", "title": "ms per query (median)"},
                "color": {"field": "op", "type": "nominal", "title": "operator"},
                "tooltip": [
                    {"field": "layer"},
                    {"field": "op", "title": "operator"},
                    {"field": "ms", "format": ".4g"},
                    {"field": "share", "format": ".1%"},
                ],
            },
        },
        height=max(120, 16 * len(values)),
    )
