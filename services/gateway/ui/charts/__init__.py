"""Every chart dlscope draws, as a Vega-Lite specification built here, once: the web pages
hand it to vega-embed in the browser, the reports to vl-convert, which renders the same
specification to SVG without a browser. Data travel inline (``data.values``), so a
specification is a complete, self-contained description of its chart.

Charts have a fixed size that suits a laptop screen; the pages' CSS lets the SVG shrink to
a narrower column. Every chart carries a ``description``, which Vega gives its SVG as the
accessible label.

    base         schema, size, fonts, palette, one colour per framework
    latency      histogram, CDF, latency over the run, warm-up, layers
    batches      latency and throughput per batch size
    comparison   per-framework bars, CDFs, parity
    history      one model x framework x hardware over time
    tokens       a generation's TTFT, TPOT and ITL CDFs, tokens over time
    sweeps       a language model across loads, and the Pareto chart of its trade-offs
"""

from services.gateway.ui.charts.base import SCHEMA, Spec
from services.gateway.ui.charts.batches import batch_latency, batch_throughput
from services.gateway.ui.charts.comparison import framework_bars, framework_cdf, parity_heatmap
from services.gateway.ui.charts.history import history
from services.gateway.ui.charts.latency import cdf, histogram, layers, series, warmup
from services.gateway.ui.charts.sweeps import (
    ParetoPoint,
    SweepCurvePoint,
    pareto,
    sweep_latency,
    sweep_throughput,
)
from services.gateway.ui.charts.tokens import token_cdf, token_timeline

__all__ = [
    "SCHEMA",
    "ParetoPoint",
    "Spec",
    "SweepCurvePoint",
    "batch_latency",
    "batch_throughput",
    "cdf",
    "framework_bars",
    "framework_cdf",
    "histogram",
    "history",
    "layers",
    "pareto",
    "parity_heatmap",
    "series",
    "sweep_latency",
    "sweep_throughput",
    "token_cdf",
    "token_timeline",
    "warmup",
]
