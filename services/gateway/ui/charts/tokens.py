"""A generative evaluation's tokens: the TTFT, TPOT and inter-token latency CDFs, and the
first requests' tokens over time."""

from __future__ import annotations

from services.gateway.ui.charts.base import PALETTE, Spec, cdf_axes, cdf_tooltip, chart
from shared.messages import TokenFigures

__all__ = ["token_cdf", "token_timeline"]

_METRICS = (
    ("TTFT", "time to first token"),
    ("TPOT", "time per output token"),
    ("ITL", "inter-token gap"),
)


def token_cdf(tokens: TokenFigures) -> Spec:
    """One line per metric: TTFT, TPOT and ITL, each from the requests' scheduled times."""
    values = [
        {"metric": name, "latency": point.latency_ms, "fraction": point.fraction}
        for (name, _), points in zip(_METRICS, (tokens.ttft, tokens.tpot, tokens.itl), strict=True)
        for point in points
    ]
    return chart(
        "Cumulative distributions of time to first token, time per output token and the "
        "gaps between tokens",
        {
            "title": {
                "text": "Token latency CDFs",
                "subtitle": "TTFT from each request's scheduled time; ITL: every gap, pooled",
            },
            "data": {"values": values},
            "mark": {"type": "line", "interpolate": "step-after"},
            "encoding": {
                **cdf_axes("ms (log scale)", "share at most this long"),
                "color": {
                    "field": "metric",
                    "type": "nominal",
                    "title": "metric",
                    "scale": {"domain": [m for m, _ in _METRICS], "range": list(PALETTE[:3])},
                },
                "tooltip": cdf_tooltip({"field": "metric"}),
            },
        },
    )


def token_timeline(tokens: TokenFigures) -> Spec:
    """Tokens so far against time since each request was scheduled, one line per request:
    the first token's delay is TTFT, the slope the decode rate, a flat stretch a stall."""
    values = [
        {"request": line.request, "ms": ms, "tokens": count}
        for line in tokens.timelines
        for ms, count in zip(line.ms, line.tokens, strict=True)
    ]
    return chart(
        f"Tokens generated over time for the first {len(tokens.timelines)} timed requests",
        {
            "title": {
                "text": "Tokens over time, per request",
                "subtitle": f"the first {len(tokens.timelines)} timed requests",
            },
            "data": {"values": values},
            "mark": {"type": "line", "point": False, "opacity": 0.6, "color": PALETTE[0]},
            "encoding": {
                # From 0, the scheduled time: the first point's distance from it is the TTFT.
                "x": {
                    "field": "ms",
                    "type": "quantitative",
                    "title": "ms since scheduled",
                    "scale": {"zero": True},
                },
                "y": {"field": "tokens", "type": "quantitative", "title": "tokens so far"},
                "detail": {"field": "request", "type": "nominal"},
                "tooltip": [
                    {"field": "request"},
                    {"field": "tokens"},
                    {"field": "ms", "format": ".4g"},
                ],
            },
        },
    )
