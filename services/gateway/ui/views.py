"""Documents turned into what a template shows: rows of numbers with their intervals, the
verdict's reasons in plain words, and the charts' specifications. The same for a page and a
report, so both say the same thing."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from services.gateway.sweeps import SweepView
from services.gateway.ui import charts
from services.gateway.ui.charts import Spec
from services.gateway.ui.documents import EvaluationDocument, ExperimentDocument
from services.gateway.ui.machine import cpu_text, machine_info, memory_text
from shared.measurement import LatencyStatistics
from shared.measurement.pareto import pareto_frontier, per_user_tokens_per_s
from shared.measurement.statistics import Percentile
from shared.messages import EvaluationFigures, LatencySummary, PairParity

__all__ = [
    "EXPLANATIONS",
    "Estimate",
    "ParityCell",
    "environment_rows",
    "evaluation_charts",
    "evaluation_info",
    "experiment_charts",
    "experiment_info",
    "headline_of",
    "parity_matrix",
    "percentile_of",
    "statistics_rows",
    "sweep_charts",
]

_MS = 1e-6

# Each verdict reason, in plain words: what it means for the number, and what to do.
EXPLANATIONS: dict[str, str] = {
    "too_few_queries": "Too few queries ran to claim this percentile (MLPerf's early-stopping "
    "minimum). Run more iterations or a longer minimum duration.",
    "headline_is_bound": "The headline percentile is a bound (≥): the run had fewer queries "
    "than that percentile needs, so the true value may be higher. Run longer to estimate it.",
    "duration_too_short": "The timed phase was shorter than the scenario's minimum, so slow "
    "effects (clock changes, garbage collection) may be missed.",
    "latency_bound_missed": "At the requested load the tail latency exceeded its bound: this "
    "system cannot serve that many queries per second within it.",
    "load_generator_late": "The load generator could not issue queries on time, so the load "
    "applied was lighter than asked for: the latencies look better than they are.",
    "queries_unfinished": "Some scheduled queries never ran before the time limit.",
    "high_run_to_run_variation": "Repeated runs disagree more than allowed: one run's number "
    "may not be reproducible. Quiet the machine, or report the spread.",
    "cpu_governor_not_performance": "The CPU may change its clock during the run. Set the "
    "'performance' governor for stable numbers.",
    "other_heavy_processes": "Other programs were busy just before the run started (a look "
    "back, not a measurement of the timed queries: see the timed window below).",
    "other_processes_used_cpu": "Other processes (other programs, or other dlscope workers' "
    "measurements) used a share of the CPUs while the queries were timed: they competed with "
    "the model, and the latencies include that. Measure again on a quiet machine.",
    "cpu_steal": "The hypervisor gave this virtual machine's CPU time to other guests while "
    "the queries were timed: the latencies include that wait.",
    "cpu_throttled": "The CPU slowed itself down (too hot) while the queries were timed.",
    "other_gpu_processes": "Other processes used the GPU while the queries were timed.",
    "noise_probe_shifted": "A fixed reference workload ran at a different speed after the "
    "timed queries than before the warm-up: the machine changed under the run (its clock, "
    "its temperature, a neighbour), so the numbers describe no single state of it.",
    "warmup_not_steady": "Latency was still changing when the warm-up ended: the first timed "
    "queries may include start-up effects.",
    "high_harness_overhead": "dlscope's own timing code is a noticeable share of each query: "
    "very short latencies are inflated by it.",
    "machine_loaded": "The machine was already loaded when the run started.",
    "query_stalled": "A timed query stalled: it took over a second and over 100 times the "
    "median, so the process was held up (stopped, paused or swapped out) and the stall was "
    "measured, not the model.",
    "measured_under_contention": "Measured under contention, as asked (concurrent): this run "
    "did not have the device to itself, so other measurements may have run on the same cores "
    "or GPU at the same time. The number shows the contention, not the model alone; run "
    "without concurrent to compare frameworks.",
}


@dataclass(frozen=True, slots=True)
class Estimate:
    """A number with its interval, and whether it is only a bound."""

    value: float
    low: float | None = None
    high: float | None = None
    bound: bool = False
    note: str = ""

    @property
    def has_interval(self) -> bool:
        return self.low is not None


def _percentile(p: Percentile) -> Estimate:
    interval = p.interval
    return Estimate(
        value=p.value_ns * _MS,
        low=None if interval is None else interval.low * _MS,
        high=None if interval is None or interval.high is None else interval.high * _MS,
        bound=p.kind == "bound",
        note=f"bound: fewer than the {p.min_queries} queries needed" if p.kind == "bound" else "",
    )


def statistics_rows(summary: LatencySummary) -> list[dict[str, Any]]:
    """One row per phase (per batch size in a sweep)."""
    return [_row(s) for s in summary.statistics]


def _row(s: LatencyStatistics) -> dict[str, Any]:
    throughput = s.throughput.interval
    percentiles = {f"p{p.percentile * 100:g}": _percentile(p) for p in s.percentiles}
    percentiles[f"p{s.median.percentile * 100:g}"] = _percentile(s.median)
    percentiles[f"p{s.headline.percentile * 100:g}"] = _percentile(s.headline)
    return {
        "batch_size": s.samples_per_query,
        "count": s.count,
        "duration_s": s.duration_ns / 1e9,
        "mean_ms": s.mean_ns * _MS,
        "std_ms": s.std_ns * _MS,
        "cv": s.cv,
        "min_ms": s.min_ns * _MS,
        "max_ms": s.max_ns * _MS,
        "headline": f"p{s.headline.percentile * 100:g}",
        "percentiles": percentiles,
        "throughput": Estimate(s.throughput.per_s, throughput.low, throughput.high),
        "confidence": throughput.confidence,
    }


def headline_of(summary: LatencySummary | None) -> Estimate | None:
    """The headline latency with its interval (the flat p90 where no statistics exist)."""
    if summary is None:
        return None
    if summary.statistics:
        return _percentile(summary.statistics[0].headline)
    return Estimate(summary.p90_ms)


def percentile_of(summary: LatencySummary, p: float) -> Estimate:
    """The flat percentile ``p`` (``p50_ms``), a bound where the headline phase's statistics
    judged it one (LoadGen's figures come with no judgement of dlscope's: estimates)."""
    value = {0.5: summary.p50_ms, 0.9: summary.p90_ms, 0.99: summary.p99_ms}[p]
    if summary.statistics:
        phase = summary.statistics[0]
        for found in (phase.median, phase.headline, *phase.percentiles):
            if found.percentile == p:
                return replace(_percentile(found), value=value, low=None, high=None)
    return Estimate(value)


def throughput_of(summary: LatencySummary | None) -> Estimate | None:
    if summary is None:
        return None
    if summary.statistics:
        t = summary.statistics[0].throughput
        return Estimate(t.per_s, t.interval.low, t.interval.high)
    return Estimate(summary.throughput_per_s)


# The environment's most telling entries first; the rest follow, folded.
_FIRST = (
    "host",
    "cpu_model",
    "cpu_cores",
    "cpu_threads",
    "memory_bytes",
    "os",
    "framework",
    "framework_version",
    "python",
    "dlscope_version",
    "cpu_governor",
    "load_average",
    "gpus",
)


def environment_rows(
    environment: Mapping[str, Any] | None,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the key entries, the rest) as text."""
    environment = environment or {}
    first = [(k, _text(k, environment[k])) for k in _FIRST if k in environment]
    rest = [(k, _text(k, v)) for k, v in sorted(environment.items()) if k not in _FIRST]
    return first, rest


def _text(key: str, value: Any) -> str:
    if value is None:
        return "unknown"
    if key.endswith("_bytes") and isinstance(value, int | float):
        return f"{value / 2**30:.1f} GiB"
    if key == "load_average" and isinstance(value, list):
        return " / ".join(f"{float(v):.2f}" for v in value) + " (1, 5, 15 min)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def evaluation_charts(document: EvaluationDocument) -> dict[str, Spec]:
    figures = document.figures
    if figures is None:
        return {}
    drawn: dict[str, Spec] = {}
    if figures.phases:
        first = figures.phases[0]
        several = len(figures.phases) > 1
        suffix = f" (batch size {first.batch_size})" if several else ""
        drawn["histogram"] = charts.histogram(first, title=suffix)
        drawn["cdf"] = charts.cdf(figures.phases)
        drawn["series"] = charts.series(first, title=suffix)
    if len(figures.batch_curve) > 1:
        drawn["batch_latency"] = charts.batch_latency(figures.batch_curve)
        drawn["batch_throughput"] = charts.batch_throughput(figures.batch_curve)
    if figures.warmup is not None:
        drawn["warmup"] = charts.warmup(figures.warmup)
    if figures.layers:
        drawn["layers"] = charts.layers(figures.layers)
    if figures.tokens is not None:
        drawn["token_cdf"] = charts.token_cdf(figures.tokens)
        drawn["token_timeline"] = charts.token_timeline(figures.tokens)
    return drawn


def experiment_charts(document: ExperimentDocument) -> dict[str, Spec]:
    rows_latency, rows_throughput = [], []
    for member in document.members:
        summary = member.result
        if summary is None:
            continue
        label = document.label(member)
        headline = headline_of(summary)
        throughput = throughput_of(summary)
        assert headline is not None, "a completed member has a headline"
        assert throughput is not None, "and a throughput"
        rows_latency.append(_bar(label, member.framework, headline))
        rows_throughput.append(_bar(label, member.framework, throughput))
    drawn: dict[str, Spec] = {}
    if rows_latency:
        first = next(s for m in document.members if (s := m.result) is not None)
        label = first.headline
        drawn["latency"] = charts.framework_bars(
            rows_latency, measure="latency", title=f"{label} latency", unit="ms"
        )
        drawn["throughput"] = charts.framework_bars(
            rows_throughput, measure="throughput", title="Throughput", unit="samples/s"
        )
    with_figures: list[tuple[str, str, EvaluationFigures]] = [
        (document.label(m), m.framework or "?", document.figures[m.evaluation_id])
        for m in document.members
        if m.evaluation_id in document.figures and document.figures[m.evaluation_id].phases
    ]
    if with_figures:
        drawn["cdf"] = charts.framework_cdf(with_figures)
    matrix = parity_matrix(document)
    cells = [
        {
            "reference": row_label,
            "candidate": cell.label,
            "error": cell.parity.max_rel_error or 0.0,
            "agreement": cell.parity.top1_agreement,
            "verdict": "✓" if cell.parity.within_tolerance else "✗",
        }
        for row_label, row in matrix
        for cell in row
        if cell.parity is not None and cell.parity.comparable
    ]
    if cells:
        drawn["parity"] = charts.parity_heatmap(cells, [label for label, _ in matrix])
    tradeoffs = _member_tradeoffs(document)
    if len(tradeoffs) > 1:
        drawn["pareto"] = charts.pareto(tradeoffs, "member")
    return drawn


def _member_tradeoffs(document: ExperimentDocument) -> list[charts.ParetoPoint]:
    """Each generating member's whole-system output tokens/s and one user's (1000 / its mean
    TPOT), on the frontier where no other member is better on both."""
    found = []
    for member in document.members:
        generation = None if member.result is None else member.result.generation
        per_user = per_user_tokens_per_s(generation)
        if generation is None or per_user is None:
            continue
        found.append((member.evaluation_id, document.label(member), per_user, generation))
    frontier = pareto_frontier(
        [(key, per_user, g.output_tokens_per_s) for key, _, per_user, g in found]
    )
    return [
        charts.ParetoPoint(label, per_user, g.output_tokens_per_s, key in frontier)
        for key, label, per_user, g in found
    ]


# What one point of a sweep's Pareto chart is.
_LOAD_NAMES = {"streams": "number of streams", "rate": "rate", "batch": "batch size"}


def sweep_charts(sweep: SweepView) -> dict[str, Spec | None]:
    """A sweep's curves by load and its Pareto chart (None: no load has both figures)."""
    counted = sweep.counted
    points = [
        charts.SweepCurvePoint(
            load.level, load.output_tokens_per_s, load.ttft_ms, load.tpot_ms, load.verdict
        )
        for load in counted
    ]
    tradeoffs = [
        charts.ParetoPoint(
            f"{load.level:g}", load.per_user_tokens_per_s, load.output_tokens_per_s, load.pareto
        )
        for load in counted
        if load.per_user_tokens_per_s is not None and load.output_tokens_per_s is not None
    ]
    unit = sweep.unit
    return {
        "throughput": charts.sweep_throughput(points, unit),
        "latency": charts.sweep_latency(points, unit, sweep.percentile),
        "pareto": charts.pareto(tradeoffs, _LOAD_NAMES[sweep.over]) if tradeoffs else None,
    }


def _bar(label: str, framework: str | None, estimate: Estimate) -> dict[str, Any]:
    return {
        "label": label,
        "framework": framework or "?",
        "value": estimate.value,
        "low": estimate.low if estimate.low is not None else estimate.value,
        "high": estimate.high if estimate.high is not None else estimate.value,
    }


@dataclass(frozen=True, slots=True)
class ParityCell:
    label: str
    parity: PairParity | None  # None on the diagonal, or for a pair not compared
    diagonal: bool = False


def parity_matrix(
    document: ExperimentDocument,
) -> list[tuple[str, list[ParityCell]]]:
    """Every completed member against every other: the pair's parity (either order)."""
    comparison = document.comparison
    if comparison is None or not comparison.parity:
        return []
    pairs: dict[frozenset[uuid.UUID], PairParity] = {
        frozenset((p.reference, p.candidate)): p for p in comparison.parity
    }
    ids = list(
        dict.fromkeys(
            [p.reference for p in comparison.parity] + [p.candidate for p in comparison.parity]
        )
    )
    labels = {m.evaluation_id: document.label(m) for m in document.members}
    matrix: list[tuple[str, list[ParityCell]]] = []
    for row in ids:
        cells: list[ParityCell] = []
        for column in ids:
            label = labels.get(column, str(column)[:8])
            pair = None if row == column else pairs.get(frozenset((row, column)))
            cells.append(ParityCell(label, pair, diagonal=row == column))
        matrix.append((labels.get(row, str(row)[:8]), cells))
    return matrix


def evaluation_info(document: EvaluationDocument) -> dict[str, Any]:
    """Everything an evaluation's template reads besides the document itself."""
    summary = document.summary
    return {
        "headline": headline_of(summary),
        "throughput": throughput_of(summary),
        "rows": [] if summary is None else statistics_rows(summary),
        "charts": evaluation_charts(document),
        "environment": environment_rows(document.view.environment),
        "explanations": EXPLANATIONS,
        "machine": machine_info(summary),
        "tokens": [] if summary is None else token_rows(summary),
        "llm": None if summary is None else llm_headline(summary),
    }


def llm_headline(summary: LatencySummary) -> dict[str, Any] | None:
    """What a generative evaluation leads with, as the field reads one: TTFT and TPOT (the
    median and the headline percentile, with their intervals), output tokens/s, goodput or
    requests/s, and the requests that failed; None for any other evaluation."""
    generation = summary.generation
    if generation is None:
        return None
    ttft, tpot = generation.ttft, generation.tpot
    return {
        "ttft_median": _percentile(ttft.median),
        "ttft_headline": _percentile(ttft.headline),
        "headline_label": f"p{ttft.headline.percentile * 100:g}",
        "tpot_median": None if tpot is None else _percentile(tpot.median),
        "tpot_headline": None if tpot is None else _percentile(tpot.headline),
        "tokens_per_s": generation.output_tokens_per_s,
        "goodput_per_s": generation.goodput_per_s,
        "requests_per_s": generation.requests_per_s,
        "requests": generation.requests,
        "failed": sum(generation.failures.values()),
    }


def token_rows(summary: LatencySummary) -> list[dict[str, Any]]:
    """A generative evaluation's TTFT, TPOT, ITL and E2E rows, each with its definition."""
    generation = summary.generation
    if generation is None:
        return []
    metrics = {
        "TTFT": generation.ttft,
        "TPOT": generation.tpot,
        "ITL": generation.itl,
        "E2E": generation.e2e,
    }
    return [
        {**_row(statistics), "metric": name, "definition": generation.definitions[name.lower()]}
        for name, statistics in metrics.items()
        if statistics is not None
    ]


def experiment_info(document: ExperimentDocument) -> dict[str, Any]:
    """Everything an experiment's template reads besides the document itself."""
    comparison = document.comparison
    reference = None if comparison is None else comparison.reference
    rows = []
    for member in document.members:
        summary = member.result
        rows.append(
            {
                "member": member,
                "summary": summary,
                "headline": headline_of(summary),
                "p50": None if summary is None else percentile_of(summary, 0.5),
                "p99": None if summary is None else percentile_of(summary, 0.99),
                "throughput": throughput_of(summary),
                "framework_version": (member.environment or {}).get("framework_version", ""),
                "reference": member.evaluation_id == reference,
                "cpu": None
                if summary is None or summary.machine is None
                else cpu_text(summary.machine.cost),
                "memory": None
                if summary is None or summary.machine is None
                else memory_text(summary.machine.cost, short=True),
            }
        )
    bounded = any(
        estimate is not None and estimate.bound
        for row in rows
        for estimate in (row["headline"], row["p50"], row["p99"])
    )
    return {
        "rows": rows,
        "bounded": bounded,
        "charts": experiment_charts(document),
        "matrix": parity_matrix(document),
    }
