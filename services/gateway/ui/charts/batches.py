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
    values = [
        {
            "batch": p.batch_size,
            "latency": p.headline_ms,
            "low": p.headline_low_ms if p.headline_low_ms is not None else p.headline_ms,
            "high": p.headline_high_ms if p.headline_high_ms is not None else p.headline_ms,
        }
        for p in points
    ]
    x = _batch_axis(points)
    return chart(
        f"{headline} latency per batch size with 95% intervals",
        {
            "title": f"{headline} latency per batch size",
            **_interval_layers(
                values, x, "latency", "low", "high", f"{headline} latency (ms)", PALETTE[0]
            ),
        },
    )


def batch_throughput(points: Sequence[BatchPoint]) -> Spec:
    """Samples per second per batch size, with its 95% interval."""
    values = [
        {
            "batch": p.batch_size,
            "throughput": p.throughput_per_s,
            "low": p.throughput_low if p.throughput_low is not None else p.throughput_per_s,
            "high": p.throughput_high if p.throughput_high is not None else p.throughput_per_s,
        }
        for p in points
    ]
    x = _batch_axis(points)
    return chart(
        "Throughput per batch size with 95% intervals",
        {
            "title": "Throughput per batch size",
            **_interval_layers(values, x, "throughput", "low", "high", "samples/s", PALETTE[2]),
        },
    )
