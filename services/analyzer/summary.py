"""An evaluation's result from its raw measurement: statistics with confidence intervals for
every phase, the validity verdict with its reasons, the harness's own overhead, and what the
run cost and what else used the machine while it was timed (``machine``).

The flat fields of ``LatencySummary`` (p50_ms, throughput_per_s, ...) describe the headline
phase, the first (the only one but in a batch sweep), so tables and comparisons read one
shape whatever the scenario. With the loadgen driver the figures are LoadGen's own, parsed
from its summary: dlscope does not second-guess the reference tool.
"""

from __future__ import annotations

from typing import Any

from shared.measurement import LatencyStatistics, judge, summarize_result
from shared.measurement.cost import machine_report
from shared.measurement.generation import judge_served, judge_tokens, summarize_generation
from shared.measurement.loadgen import LoadgenResult
from shared.measurement.steady import judge_steady
from shared.messages import (
    EvaluationMeasured,
    GenerationSummary,
    LatencySummary,
    MachineWindow,
    ReasonCode,
    Scenario,
    Verdict,
)

__all__ = ["summarize"]

_MS = 1e-6


def summarize(measured: EvaluationMeasured) -> LatencySummary:
    """The result of ``measured``."""
    scenario = measured.scenario
    if measured.loadgen is not None:
        return _loadgen_summary(measured, measured.loadgen, scenario)
    run = measured.run
    assert run is not None, "EvaluationMeasured carries a run or a loadgen result"
    statistics = summarize_result(run)
    readings = measured.machine
    verdict = judge(
        run,
        statistics,
        environment=measured.conditions,
        noise=None if readings is None else readings.noise,
    )
    generation = _generation(measured, run.phases[0].issue_delays_ns, run.phases[0].window)
    if generation is not None:
        verdict = _with_token_bounds(verdict, generation, scenario)
    phase, headline = run.phases[0], statistics[0]
    return LatencySummary(
        **_flat(headline, phase.samples_per_query),
        first_inference_ms=phase.first_query_ns * _MS,
        load_ms=measured.load_ns * _MS,
        warmup_count=len(phase.warmup.latencies_ns),
        accuracy=measured.accuracy,
        fingerprint=measured.fingerprint,
        generation=generation,
        perplexity=measured.perplexity,
        scenario=scenario,
        headline=_label(headline.headline.percentile),
        statistics=list(statistics),
        verdict=verdict,
        harness_overhead_ns=phase.overhead.per_query_ns,
        warmup={
            "decided_by": phase.warmup.decided_by,
            "steady": phase.warmup.steady,
            "window_queries": phase.warmup.window_queries,
            "window_medians_ms": [m * _MS for m in phase.warmup.window_medians_ns],
            "threshold": phase.warmup.threshold,
        },
        layers=measured.layers,
        trace_level=measured.trace_level,
        tracing=measured.tracing,
        machine=machine_report(
            [p.window for p in run.phases], headline.count, phase.samples_per_query, readings
        ),
    )


def _generation(
    measured: EvaluationMeasured,
    issue_delays_ns: tuple[int, ...] = (),
    window: MachineWindow | None = None,
) -> GenerationSummary | None:
    """A generative run's token statistics from its record, whichever driver ran it; a
    server scenario's lag from the timed phase where the record keeps none (in process), and
    a served model's client's CPU from the phase's ``window``."""
    if measured.generation is None:
        return None
    scenario = measured.scenario
    return summarize_generation(
        measured.generation,
        headline_percentile=scenario.slo_percentile,
        seed=scenario.seed,
        ttft_bound_ms=scenario.ttft_bound_ms,
        tpot_bound_ms=scenario.tpot_bound_ms,
        e2e_bound_ms=scenario.e2e_bound_ms,
        issue_delays_ns=issue_delays_ns if scenario.name == "server" else (),
        window=window,
    )


# What a query's latency headline judges of an image model and no generation asked for: its
# percentile against latency_bound_ms (an image model's 10 ms by default), that percentile's
# sufficiency, and lateness as a share of that bound. A generation is judged on the token
# bounds it was given (TTFT, TPOT, E2E, each with its own sufficiency warning) and its
# client's lag by the lag rule (shared.measurement.lag), and on nothing it was not asked.
_NOT_A_GENERATIONS = frozenset(
    {ReasonCode.LATENCY_BOUND_MISSED, ReasonCode.HEADLINE_IS_BOUND, ReasonCode.LOAD_GENERATOR_LATE}
)


def _with_token_bounds(
    verdict: Verdict, generation: GenerationSummary, scenario: Scenario
) -> Verdict:
    """A generative run judged by its TTFT, TPOT and E2E bounds where it has them, never by
    a query latency bound (``_NOT_A_GENERATIONS``); and by what its run of requests says of
    itself: failed (truncated among them) requests, the client's lag, a short steady
    window."""
    kept = [r for r in verdict.reasons if r.code not in _NOT_A_GENERATIONS]
    steady = judge_steady(generation)
    reasons = (
        *kept,
        *judge_tokens(generation, scenario),
        *judge_served(generation),
        *(() if steady is None else (steady,)),
    )
    errors = any(r.severity == "error" for r in reasons)
    return Verdict(status="INVALID" if errors else "VALID", reasons=reasons)


def _flat(statistics: LatencyStatistics, samples_per_query: int) -> dict[str, Any]:
    return {
        "count": statistics.count,
        "batch_size": samples_per_query,
        "mean_ms": statistics.mean_ns * _MS,
        "std_ms": statistics.std_ns * _MS,
        "min_ms": statistics.min_ns * _MS,
        "max_ms": statistics.max_ns * _MS,
        "p50_ms": statistics.percentile(0.5).value_ns * _MS,
        "p90_ms": statistics.percentile(0.9).value_ns * _MS,
        "p99_ms": statistics.percentile(0.99).value_ns * _MS,
        "throughput_per_s": statistics.throughput.per_s,
    }


def _label(percentile: float) -> str:
    return f"p{percentile * 100:g}"


def _loadgen_summary(
    measured: EvaluationMeasured, result: LoadgenResult, scenario: Scenario
) -> LatencySummary:
    phase = result.phases[0]
    summary = phase.summary

    def ms(key: str) -> float:
        return float(summary.get(key, 0.0)) * _MS

    count = int(summary.get("result_count", summary.get("min_query_count", 0)) or 0)
    if measured.generation is not None:
        # LoadGen's server summary states the queries asked for, not those it completed (a
        # run cut at max_duration has fewer): a generation's record has every one.
        count = measured.generation.request_count
    # Offline and server report samples/s; single- and multi-stream report queries/s.
    samples = summary.get("samples_per_second") or summary.get("completed_samples_per_second")
    per_query = summary.get("qps_w_loadgen_overhead") or 0.0
    throughput = float(samples) if samples else float(per_query) * phase.samples_per_query
    return LatencySummary(
        count=count,
        batch_size=phase.samples_per_query,
        mean_ms=ms("mean_latency_ns"),
        std_ms=None,  # LoadGen's summary has no spread
        min_ms=ms("min_latency_ns"),
        max_ms=ms("max_latency_ns"),
        p50_ms=ms("50_00_percentile_latency_ns"),
        p90_ms=ms("90_00_percentile_latency_ns"),
        p99_ms=ms("99_00_percentile_latency_ns"),
        throughput_per_s=throughput,
        first_inference_ms=phase.first_query_ns * _MS,
        load_ms=measured.load_ns * _MS,
        warmup_count=len(phase.warmup.latencies_ns),
        accuracy=measured.accuracy,
        fingerprint=measured.fingerprint,
        # dlscope's statistics of the tokens LoadGen timed too: LoadGen's summary keeps
        # percentiles only, the record every token's time, for the intervals and the charts.
        generation=_generation(measured),
        perplexity=measured.perplexity,
        scenario=scenario,
        headline=str(summary.get("scenario", scenario.name)),
        loadgen=[
            {
                "output_dir": p.output_dir,
                "samples_per_query": p.samples_per_query,
                "result": p.summary.get("result"),
                "summary": p.summary,
            }
            for p in result.phases
        ],
        layers=measured.layers,
        trace_level=measured.trace_level,
        tracing=measured.tracing,
        machine=machine_report(
            [p.window for p in result.phases],
            phase.framework_calls if phase.framework_calls is not None else count,
            phase.samples_per_query,
            measured.machine,
        ),
    )
