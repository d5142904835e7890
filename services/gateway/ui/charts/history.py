"""One model x framework x hardware over time, with the environment's changes marked."""

from __future__ import annotations

from services.gateway.ui.charts.base import PALETTE, Spec, chart
from shared.messages import EvaluationHistory

__all__ = ["history"]


def history(data: EvaluationHistory) -> Spec:
    """The headline latency over time with its interval; a rule where the environment
    changed (hover for what)."""
    values = [
        {
            "at": p.at.isoformat(),
            "latency": p.headline_ms,
            "low": p.headline_low_ms if p.headline_low_ms is not None else p.headline_ms,
            "high": p.headline_high_ms if p.headline_high_ms is not None else p.headline_ms,
            "headline": p.headline,
            "version": p.framework_version or "",
            "verdict": p.verdict or "",
            "id": str(p.evaluation_id),
        }
        for p in data.points
    ]
    changes = [
        {"at": p.at.isoformat(), "changed": "; ".join(p.changed)} for p in data.points if p.changed
    ]
    x = {
        "field": "at",
        "type": "temporal",
        "title": "requested",
        "axis": {"format": "%Y-%m-%d %H:%M", "labelAngle": -30, "labelOverlap": True},
    }
    layer: list[Spec] = [
        {
            "data": {"values": values},
            "mark": {"type": "errorbar", "ticks": True, "color": PALETTE[0]},
            "encoding": {
                "x": x,
                "y": {"field": "low", "type": "quantitative", "title": "headline latency (ms)"},
                "y2": {"field": "high"},
            },
        },
        {
            "data": {"values": values},
            "mark": {"type": "line", "point": True, "color": PALETTE[0]},
            "encoding": {
                "x": x,
                "y": {"field": "latency", "type": "quantitative"},
                "tooltip": [
                    {"field": "at", "type": "temporal", "format": "%Y-%m-%d %H:%M:%S"},
                    {"field": "headline"},
                    {"field": "latency", "title": "ms", "format": ".4g"},
                    {"field": "version", "title": "framework"},
                    {"field": "verdict"},
                    {"field": "id", "title": "evaluation"},
                ],
            },
        },
    ]
    if changes:
        layer.append(
            {
                "data": {"values": changes},
                "mark": {"type": "rule", "color": PALETTE[5], "strokeDash": [4, 3]},
                "encoding": {
                    "x": x,
                    "tooltip": [
                        {"field": "at", "type": "temporal", "format": "%Y-%m-%d %H:%M:%S"},
                        {"field": "changed", "title": "environment changed"},
                    ],
                },
            }
        )
    return chart(
        f"Headline latency of {data.model} on {data.framework} ({data.hardware}) over time; "
        "dashed rules mark environment changes",
        {
            "title": {
                "text": f"{data.model} on {data.framework} ({data.hardware})",
                "subtitle": "dashed: the environment changed (versions, CPU, host)",
            },
            "layer": layer,
        },
    )
