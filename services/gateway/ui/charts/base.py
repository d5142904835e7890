"""What every chart shares: the Vega-Lite schema, size, fonts and palette, one colour per
framework on every chart, and the axes of a latency CDF."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.messages import FRAMEWORKS

__all__ = [
    "HEIGHT",
    "PALETTE",
    "SCHEMA",
    "WIDTH",
    "Spec",
    "cdf_axes",
    "cdf_tooltip",
    "chart",
    "framework_colour",
]

Spec = dict[str, Any]
SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
WIDTH = 560
HEIGHT = 220
# dlscope's palette, colour-blind safe (Okabe-Ito), in the order frameworks are listed.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
_CONFIG: Spec = {
    # Arial's metrics (Liberation Sans is its metric twin): a report's SVG is laid out by
    # vl-convert with one font and shown by a browser with another; with metric-compatible
    # fonts the labels still fit the space measured for them.
    "font": "Arial, 'Liberation Sans', Helvetica, sans-serif",
    "view": {"stroke": None},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e5e7eb"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12},
    "range": {"category": PALETTE},
}


def framework_colour(present: Iterable[str]) -> Spec:
    """The same colour for a framework on every chart (its place among dlscope's
    frameworks), whichever others a chart shows."""
    shown = set(present)
    known = [f for f in FRAMEWORKS if f in shown]
    others = sorted(shown - set(FRAMEWORKS))
    return {
        "field": "framework",
        "type": "nominal",
        "title": "framework",
        "scale": {
            "domain": known + others,
            "range": [PALETTE[FRAMEWORKS.index(f) % len(PALETTE)] for f in known]
            + [PALETTE[-1] for _ in others],
        },
    }


def chart(description: str, body: Spec, *, width: int = WIDTH, height: int = HEIGHT) -> Spec:
    return {
        "$schema": SCHEMA,
        "description": description,
        "width": width,
        "height": height,
        "config": _CONFIG,
        **body,
    }


def cdf_axes(latency_title: str, share_title: str) -> Spec:
    """The ``x`` and ``y`` of a latency CDF (values with ``latency`` in ms and ``fraction``):
    every CDF dlscope draws reads the same way, whatever its lines are."""
    return {
        "x": {
            "field": "latency",
            "type": "quantitative",
            "title": latency_title,
            # A tail a thousand times the median is common: on a linear axis it would
            # flatten the body of the distribution into one vertical line.
            "scale": {"type": "log", "nice": False},
        },
        "y": {
            "field": "fraction",
            "type": "quantitative",
            "title": share_title,
            "axis": {"format": "%"},
        },
    }


def cdf_tooltip(*first: Spec) -> list[Spec]:
    """A CDF point's tooltip: ``first`` (what its line is), then its latency and share."""
    return [
        *first,
        {"field": "latency", "title": "ms", "format": ".4g"},
        {"field": "fraction", "title": "share", "format": ".2%"},
    ]
