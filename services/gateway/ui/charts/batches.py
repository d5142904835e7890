"""A batch sweep: the headline latency and the throughput per batch size, with intervals."""

from __future__ import annotations

from collections.abc import Sequence

from services.gateway.ui.charts.base import PALETTE, Spec, chart
from shared.messages import BatchPoint

__all__ = ["batch_latency", "batch_throughput"]


def _interval_layers(
    values: list[Spec], x: Spec, y: str, low: str, high: str, y_title: str, color: str
) -> Spec:
    return {
        "data": {"values": values},
        "layer": [
            {
                "mark": {"type": "line", "point": True, "color": color},
                "encoding": {
                    "x": x,
                    "y": {"field": y, "type": "quantitative", "title": y_title},
                    "tooltip": [
                        {"field": "batch", "title": "batch size"},
                        {"field": y, "format": ".4g"},
                        {"field": low, "title": "interval from", "format": ".4g"},
                        {"field": high, "title": "interval to", "format": ".4g"},
                    ],
                },
            },
            {
                "mark": {"type": "errorbar", "ticks": True, "color": color},
                "encoding": {
                    "x": x,
                    "y": {"field": low, "type": "quantitative", "title": y_title},
                    "y2": {"field": high},
                },
            },
        ],
    }


def _batch_axis(points: Sequence[BatchPoint]) -> Spec:
    """Batch sizes on a log2 axis: sweeps double them, so each step is one step apart."""
    return {
        "field": "batch",
        "type": "quantitative",
        "title": "batch size (samples per query, log scale)",
        "scale": {"type": "log", "base": 2},
        "axis": {"values": [p.batch_size for p in points], "format": "d"},
    }


def batch_latency(points: Sequence[BatchPoint]) -> Spec:
    """Headline latency per batch size, with its 95% interval."""
    headline = points[0].headline if points else "p90"
    measured = [(p.headline_ms, p.headline_low_ms, p.headline_high_ms) for p in points]
    return _per_batch_size(
        points, measured, "latency", f"{headline} latency", f"{headline} latency (ms)", PALETTE[0]
    )


def batch_throughput(points: Sequence[BatchPoint]) -> Spec:
    """Samples per second per batch size, with its 95% interval."""
    measured = [(p.throughput_per_s, p.throughput_low, p.throughput_high) for p in points]
    return _per_batch_size(points, measured, "throughput", "Throughput", "samples/s", PALETTE[2])


def _per_batch_size(
    points: Sequence[BatchPoint],
    measured: Sequence[tuple[float, float | None, float | None]],
    field: str,
    what: str,
    y_title: str,
    colour: str,
) -> Spec:
    """``what`` per batch size: each point's value (as ``field``) and its 95% interval,
    ``measured`` in the order of ``points``; a value without an interval spans only itself."""
    values = [
        {
            "batch": p.batch_size,
            field: value,
            "low": low if low is not None else value,
            "high": high if high is not None else value,
        }
        for p, (value, low, high) in zip(points, measured, strict=True)
    ]
    return chart(
        f"{what} per batch size with 95% intervals",
        {
            "title": f"{what} per batch size",
            **_interval_layers(values, _batch_axis(points), field, "low", "high", y_title, colour),
        },
    )
