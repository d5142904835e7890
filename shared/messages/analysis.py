"""The analyzer's request/reply calls: what the web pages and the reports draw, computed from
the stored raw measurements, so any figure can be drawn again from the event store later.

Request/reply (routing key ``rpc.analyzer.<call>`` on the jobs exchange):

    figures   evaluation ids -> per evaluation: latency histogram, CDF, latency over query
              index, per-batch-size curves, warm-up, layer breakdown
    history   model + framework + hardware -> its completed evaluations over time, each
              marked with what changed in its environment since the one before

Every latency here is in milliseconds: these are figures for people, not measurements to
compute with (those stay in ``evaluation.measured``, in nanoseconds).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import Field

from shared.inputs import Reason
from shared.messages.envelope import Payload
from shared.values import Frozen

__all__ = [
    "MAX_FIGURE_IDS",
    "BatchPoint",
    "CdfPoint",
    "EvaluationFigures",
    "EvaluationHistory",
    "FiguresReply",
    "FiguresRequest",
    "HistogramBin",
    "HistoryPoint",
    "HistoryReply",
    "HistoryRequest",
    "LayerShare",
    "PhaseFigures",
    "SeriesPoint",
    "WarmupFigure",
]

# One call draws a page or a report: an experiment's members, at most a few dozen.
MAX_FIGURE_IDS = 100


class HistogramBin(Frozen):
    low_ms: float
    high_ms: float
    count: int = Field(ge=0)


class CdfPoint(Frozen):
    latency_ms: float
    fraction: float = Field(ge=0, le=1, description="share of queries at most this long")


class SeriesPoint(Frozen):
    """Queries ``index`` .. ``index + bucket - 1`` in issue order: their median, least and
    greatest latency (all three the one latency when a bucket holds one query)."""

    index: int = Field(ge=0)
    latency_ms: float
    low_ms: float
    high_ms: float


class PhaseFigures(Frozen):
    """One timed phase: the run, or one batch size of a sweep."""

    batch_size: int = Field(ge=1, description="samples per query")
    count: int = Field(ge=0, description="timed queries")
    first_query_ms: float = Field(description="the cold first query, apart from the rest")
    histogram: list[HistogramBin]
    above_ms: float | None = Field(
        default=None, description="the histogram stops here; the slowest queries lie beyond"
    )
    above_count: int = Field(default=0, ge=0, description="queries beyond ``above_ms``")
    cdf: list[CdfPoint]
    bucket: int = Field(ge=1, description="queries per point of ``series``")
    series: list[SeriesPoint] = Field(description="latency over the query index")


class BatchPoint(Frozen):
    """One batch size of a sweep: the headline percentile and throughput with their
    intervals (``*_low``/``*_high``; high None: no upper limit could be given)."""

    batch_size: int
    headline: str = Field(description="the headline percentile's label, e.g. p90")
    headline_ms: float
    headline_low_ms: float | None
    headline_high_ms: float | None
    bound: bool = Field(
        description="too few queries to estimate the headline: a bound (the true value may be "
        "higher)"
    )
    p50_ms: float
    p99_ms: float
    throughput_per_s: float
    throughput_low: float | None
    throughput_high: float | None


class WarmupFigure(Frozen):
    latencies_ms: list[float] = Field(description="warm-up queries in order (thinned if many)")
    every: int = Field(ge=1, description="one latency kept of every this many")
    window_queries: int
    window_medians_ms: list[float]
    decided_by: str
    steady: bool


class LayerShare(Frozen):
    node: str
    op_type: str
    duration_ms: float = Field(description="per query")
    share: float = Field(ge=0, description="of a query's time (or of the summed layer time)")


class TokenTimeline(Frozen):
    """One generated request: when each of its tokens came, in ms from its scheduled time
    (thinned to at most a few hundred points; the last token always kept)."""

    request: int = Field(ge=0, description="its place among the timed requests")
    tokens: list[int] = Field(description="tokens so far at each point")
    ms: list[float] = Field(description="ms from the request's scheduled time")


class TokenFigures(Frozen):
    """A generative evaluation's token latencies, as the pages draw them."""

    ttft: list[CdfPoint]
    tpot: list[CdfPoint]
    itl: list[CdfPoint]
    timelines: list[TokenTimeline] = Field(description="the first timed requests' tokens")


class EvaluationFigures(Frozen):
    evaluation_id: uuid.UUID
    driver: str = Field(description="native, or loadgen (no raw latencies: no phases)")
    phases: list[PhaseFigures]
    batch_curve: list[BatchPoint] = Field(description="per batch size, in increasing order")
    warmup: WarmupFigure | None = None
    layers: list[LayerShare] = Field(default_factory=list, description="slowest first")
    layers_source: str | None = Field(
        default=None, description="where the layer times come from, e.g. a profiled pass"
    )
    tokens: TokenFigures | None = Field(
        default=None, description="a generative evaluation's TTFT, TPOT and ITL CDFs, timelines"
    )


class FiguresRequest(Payload):
    TYPE = "analyzer.figures"

    evaluation_ids: list[uuid.UUID] = Field(min_length=1, max_length=MAX_FIGURE_IDS)


class FiguresReply(Payload):
    """The reply: figures of each evaluation measured so far; the others listed apart."""

    TYPE = "analyzer.figures-reply"

    figures: list[EvaluationFigures] = Field(default_factory=list)
    unmeasured: list[uuid.UUID] = Field(
        default_factory=list, description="no measurement stored (yet): failed, or running"
    )
    error: Reason | None = None


class HistoryPoint(Frozen):
    evaluation_id: uuid.UUID
    at: datetime = Field(description="when it was requested")
    model_version: str | None
    framework_version: str | None
    host: str | None
    cpu: str | None
    headline: str
    headline_ms: float
    headline_low_ms: float | None
    headline_high_ms: float | None
    p50_ms: float
    p99_ms: float
    throughput_per_s: float
    verdict: str | None
    batch_size: int
    scenario: str
    changed: list[str] = Field(
        default_factory=list,
        description="what differs from the evaluation before it: versions, CPU, host",
    )


class HistoryRequest(Payload):
    TYPE = "analyzer.history"

    model: str = Field(min_length=1)
    framework: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    limit: int = Field(default=200, ge=1, le=5000, description="the newest this many")


class EvaluationHistory(Frozen):
    model: str
    framework: str
    hardware: str
    points: list[HistoryPoint] = Field(description="oldest first")


class HistoryReply(Payload):
    TYPE = "analyzer.history-reply"

    history: EvaluationHistory | None = None
    error: Reason | None = None
