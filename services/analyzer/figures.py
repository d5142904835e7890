"""What the pages and reports draw, from an evaluation's raw measurement: pure functions of
``evaluation.measured``, so a figure drawn today from the event store is the figure drawn
the day it ran.

Sizes are bounded whatever the run's length, so a page of a 100 000-query run is as light as
one of 100 queries: at most ``MAX_BINS`` histogram bins, ``CDF_POINTS`` (plus the tail) CDF
points and ``SERIES_POINTS`` points of latency over the query index, each then the median,
least and greatest latency of consecutive queries (a thinned series would hide the spikes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from shared.breakdown import ranked
from shared.measurement import LatencyStatistics, summarize_result
from shared.measurement.results import TimedPhase
from shared.measurement.warmup import WarmupReport
from shared.messages import (
    BatchPoint,
    CdfPoint,
    EvaluationFigures,
    EvaluationMeasured,
    EvaluationProfiled,
    GenerationRecord,
    HistogramBin,
    LayerShare,
    LayerTiming,
    PhaseFigures,
    SeriesPoint,
    TokenFigures,
    TokenTimeline,
    WarmupFigure,
)

__all__ = [
    "CDF_POINTS",
    "MAX_BINS",
    "SERIES_POINTS",
    "batch_curve",
    "cdf",
    "figures",
    "histogram",
    "layer_shares",
    "series",
    "tokens",
]

MAX_BINS = 60
MIN_BINS = 5
CDF_POINTS = 300
SERIES_POINTS = 1000
WARMUP_POINTS = 500
MAX_LAYERS = 40
# The tail a latency CDF is read for: kept exactly however many points the body is given.
_TAIL = (0.99, 0.995, 0.999, 0.9995, 0.9999)
# A histogram whose slowest queries lie this far beyond its p99 stops there: a handful of
# outliers (a garbage collection, a preempted thread) would otherwise squeeze every other
# query into the first bin or two. The CDF and the series show the tail.
_TAIL_CLIP = 2.0
_TAIL_MIN_QUERIES = 100
_MS = 1e-6


def figures(
    measured: EvaluationMeasured, profiled: EvaluationProfiled | None = None
) -> EvaluationFigures:
    """Every figure of one measured evaluation (with LoadGen's driver: only its warm-up,
    layers and a generation's tokens; LoadGen keeps its per-query latencies in its own
    logs). The layers come from the shallowest profiled pass where the evaluation was traced
    at framework level or deeper, else from the device timings the measurement carries (OpenCL)."""
    layers, source = _layers(measured, profiled)
    if measured.run is None:
        assert measured.loadgen is not None, "a measurement carries a run or a loadgen result"
        return EvaluationFigures(
            evaluation_id=measured.evaluation_id,
            driver="loadgen",
            phases=[],
            batch_curve=[],
            warmup=_warmup(measured.loadgen.phases[0].warmup),
            layers=layers,
            layers_source=source,
            tokens=None if measured.generation is None else tokens(measured.generation),
        )
    run = measured.run
    return EvaluationFigures(
        evaluation_id=measured.evaluation_id,
        driver="native",
        phases=[_phase(phase) for phase in run.phases],
        batch_curve=batch_curve(summarize_result(run)),
        warmup=_warmup(run.phases[0].warmup),
        layers=layers,
        layers_source=source,
        tokens=None if measured.generation is None else tokens(measured.generation),
    )


# The requests whose tokens the timeline draws, and its points per request.
TIMELINES = 40
TIMELINE_POINTS = 200


def tokens(record: GenerationRecord) -> TokenFigures:
    """The token latencies' CDFs (as ``shared.messages.generation`` defines each) and the
    first requests' tokens over time."""
    requests = record.requests
    ttft = [(r.token_ns[0] - r.scheduled_ns) * _MS for r in requests]
    tpot = [
        (r.token_ns[-1] - r.token_ns[0]) * _MS / (r.output_tokens - 1)
        for r in requests
        if r.output_tokens > 1
    ]
    gaps = [np.diff(np.asarray(r.token_ns, dtype=np.float64)) * _MS for r in requests]
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
    timelines = []
    for number, request in enumerate(requests[:TIMELINES]):
        times = np.asarray(request.token_ns, dtype=np.float64) - request.scheduled_ns
        kept = np.unique(
            np.linspace(0, len(times) - 1, min(len(times), TIMELINE_POINTS)).round().astype(int)
        )
        timelines.append(
            TokenTimeline(
                request=number,
                tokens=[int(i) + 1 for i in kept],
                ms=[float(times[i] * _MS) for i in kept],
            )
        )
    return TokenFigures(
        ttft=cdf(np.sort(np.asarray(ttft))),
        tpot=cdf(np.sort(np.asarray(tpot))) if tpot else [],
        itl=cdf(np.sort(itl)) if itl.size else [],
        timelines=timelines,
    )


def _phase(phase: TimedPhase) -> PhaseFigures:
    in_order = np.asarray(phase.latencies_ns, dtype=np.float64) * _MS
    ordered = np.sort(in_order)
    bins, above_ms, above_count = histogram(ordered)
    bucket, points = series(in_order)
    return PhaseFigures(
        batch_size=phase.samples_per_query,
        count=len(ordered),
        first_query_ms=phase.first_query_ns * _MS,
        histogram=bins,
        above_ms=above_ms,
        above_count=above_count,
        cdf=cdf(ordered),
        bucket=bucket,
        series=points,
    )


def histogram(ordered_ms: np.ndarray) -> tuple[list[HistogramBin], float | None, int]:
    """Bins of the latencies (sorted, ms) by the Freedman-Diaconis rule, within
    [MIN_BINS, MAX_BINS]; and, when a long tail was cut off, where and how many queries."""
    n = len(ordered_ms)
    if n == 0:
        return [], None, 0
    low, high = float(ordered_ms[0]), float(ordered_ms[-1])
    above_ms, above_count = None, 0
    p99 = float(np.quantile(ordered_ms, 0.99))
    if n >= _TAIL_MIN_QUERIES and high > p99 * _TAIL_CLIP:
        above_ms = p99
        above_count = int(n - np.searchsorted(ordered_ms, p99, side="right"))
        high = p99
    if high <= low:
        only = HistogramBin(low_ms=low, high_ms=high, count=n - above_count)
        return [only], above_ms, above_count
    q1, q3 = np.quantile(ordered_ms, [0.25, 0.75])
    width = 2 * float(q3 - q1) / math.cbrt(n)
    count = math.ceil((high - low) / width) if width > 0 else MAX_BINS
    count = min(max(count, MIN_BINS), MAX_BINS, max(n, 1))
    counts, edges = np.histogram(ordered_ms, bins=count, range=(low, high))
    return (
        [
            HistogramBin(low_ms=float(edges[i]), high_ms=float(edges[i + 1]), count=int(c))
            for i, c in enumerate(counts)
        ],
        above_ms,
        above_count,
    )


def cdf(ordered_ms: np.ndarray) -> list[CdfPoint]:
    """The empirical CDF: every query when there are few, else ``CDF_POINTS`` evenly spaced
    fractions and the tail's (p99 … p99.99) exactly, ending at the slowest query."""
    n = len(ordered_ms)
    if n == 0:
        return []
    if n <= CDF_POINTS + len(_TAIL):
        fractions = np.arange(1, n + 1) / n
    else:
        body = np.linspace(0, 1, CDF_POINTS + 1)[1:]
        fractions = np.unique(np.concatenate([body, [f for f in _TAIL if f * n >= 1]]))
    # The k-th smallest of n is the fraction k / n: the smallest k with k / n >= f.
    indices = np.clip(np.ceil(fractions * n - 1e-9).astype(int) - 1, 0, n - 1)
    return [
        CdfPoint(latency_ms=float(ordered_ms[i]), fraction=float(f))
        for i, f in zip(indices, fractions, strict=True)
    ]


def series(in_order_ms: np.ndarray) -> tuple[int, list[SeriesPoint]]:
    """Latency over the query index: every query, or buckets of consecutive queries."""
    n = len(in_order_ms)
    if n == 0:
        return 1, []
    bucket = max(1, math.ceil(n / SERIES_POINTS))
    points = []
    for start in range(0, n, bucket):
        chunk = in_order_ms[start : start + bucket]
        points.append(
            SeriesPoint(
                index=start,
                latency_ms=float(np.median(chunk)),
                low_ms=float(chunk.min()),
                high_ms=float(chunk.max()),
            )
        )
    return bucket, points


def batch_curve(statistics: Sequence[LatencyStatistics]) -> list[BatchPoint]:
    """The headline percentile and throughput per batch size, with their intervals."""
    points = []
    for phase in statistics:
        headline = phase.headline
        interval = headline.interval
        throughput = phase.throughput.interval
        points.append(
            BatchPoint(
                batch_size=phase.samples_per_query,
                headline=f"p{headline.percentile * 100:g}",
                headline_ms=headline.value_ns * _MS,
                headline_low_ms=None if interval is None else interval.low * _MS,
                headline_high_ms=(
                    None if interval is None or interval.high is None else interval.high * _MS
                ),
                bound=headline.kind == "bound",
                p50_ms=phase.percentile(0.5).value_ns * _MS,
                p99_ms=phase.percentile(0.99).value_ns * _MS,
                throughput_per_s=phase.throughput.per_s,
                throughput_low=throughput.low,
                throughput_high=throughput.high,
            )
        )
    return sorted(points, key=lambda p: p.batch_size)


def _warmup(report: WarmupReport) -> WarmupFigure | None:
    if not report.latencies_ns:
        return None
    every = max(1, math.ceil(len(report.latencies_ns) / WARMUP_POINTS))
    return WarmupFigure(
        latencies_ms=[ns * _MS for ns in report.latencies_ns[::every]],
        every=every,
        window_queries=report.window_queries,
        window_medians_ms=[ns * _MS for ns in report.window_medians_ns],
        decided_by=report.decided_by,
        steady=report.steady,
    )


def _layers(
    measured: EvaluationMeasured, profiled: EvaluationProfiled | None
) -> tuple[list[LayerShare], str | None]:
    if profiled is not None and profiled.passes:
        first = profiled.passes[0]
        # The ranking ``dlscope layers`` and ``dlscope run`` print (``shared.breakdown``).
        shares = [
            LayerShare(
                node=layer.node,
                op_type=layer.op_type,
                duration_ms=layer.per_query_ns * _MS,
                share=layer.per_query_share,
            )
            for layer in ranked(first)[:MAX_LAYERS]
        ]
        return shares, f"{first.level} pass: {first.source}, {first.queries} queries"
    if measured.layers:
        return layer_shares(measured.layers), "device timings of one query (profiling events)"
    return [], None


def layer_shares(layers: Sequence[LayerTiming]) -> list[LayerShare]:
    """The slowest ``MAX_LAYERS`` layers with their share of the summed layer time."""
    total = sum(layer.duration_ns for layer in layers)
    if total <= 0:
        return []
    slowest = sorted(layers, key=lambda layer: layer.duration_ns, reverse=True)[:MAX_LAYERS]
    return [
        LayerShare(
            node=layer.node,
            op_type=layer.op_type,
            duration_ms=layer.duration_ns * _MS,
            share=layer.duration_ns / total,
        )
        for layer in slowest
    ]
