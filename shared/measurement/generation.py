"""Token-level statistics of a generative evaluation, from its raw record: TTFT, TPOT,
inter-token latency, E2E and throughput, each as ``shared.messages.generation`` defines it and
each with the intervals and the sufficiency rule of every dlscope percentile."""

from __future__ import annotations

import numpy as np

from shared.measurement.statistics import summarize_latencies
from shared.messages import (
    GENERATION_METRICS,
    SERVED_METRICS,
    GenerationRecord,
    GenerationSummary,
    LatencyStatistics,
    Reason,
    ReasonCode,
    Scenario,
    Severity,
)

__all__ = [
    "MAX_FAILED_FRACTION",
    "MAX_LAG_FRACTION",
    "TOKEN_COUNT_TOLERANCE",
    "judge_served",
    "judge_tokens",
    "summarize_generation",
]

# A served run is not VALID when more than this fraction of its timed requests failed: the
# latencies of the others describe a server that was not serving everyone.
MAX_FAILED_FRACTION = 0.01
# Nor when the client issued late: its p99 lag above this fraction of the median TTFT (and
# above LAG_FLOOR_NS, below which a thread's wake-up jitter is all it is), the server was not
# offered the load the scenario names.
MAX_LAG_FRACTION = 0.05
LAG_FLOOR_NS = 1_000_000
# The tokenizer's and the server's output token counts may differ by this fraction before
# it is worth a warning (a special token, a chunk's partial character).
TOKEN_COUNT_TOLERANCE = 0.02


def summarize_generation(
    record: GenerationRecord,
    *,
    headline_percentile: float = 0.99,
    seed: int = 0,
    ttft_bound_ms: float | None = None,
    tpot_bound_ms: float | None = None,
) -> GenerationSummary:
    """The statistics of ``record``'s timed requests; each metric's headline (the one with a
    bootstrap interval besides the median) is ``headline_percentile``, the percentile the
    bounds judge. With a bound, goodput: the requests that met every bound, per second."""
    requests = record.requests
    ttft = [r.token_ns[0] - r.scheduled_ns for r in requests]
    e2e = [r.token_ns[-1] - r.scheduled_ns for r in requests]
    # A request of one token has no time per output token: it is left out of TPOT, as MLPerf
    # and the serving benchmarks do, rather than counted as zero.
    tpot = [
        (end - first) / (r.output_tokens - 1)
        for r, first, end in zip(requests, ttft, e2e, strict=True)
        if r.output_tokens > 1
    ]
    gaps = np.concatenate([np.diff(np.asarray(r.token_ns, dtype=np.int64)) for r in requests])
    duration = record.duration_ns
    output_tokens = sum(r.output_tokens for r in requests)

    def stats(values: list[float] | list[int] | np.ndarray) -> LatencyStatistics:
        return summarize_latencies(
            np.rint(np.asarray(values, dtype=np.float64)).astype(np.int64),
            duration_ns=duration,
            headline_percentile=headline_percentile,
            seed=seed,
        )

    goodput = None
    if ttft_bound_ms is not None or tpot_bound_ms is not None:
        met = 0
        for r, first, end in zip(requests, ttft, e2e, strict=True):
            per_token = (end - first) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
            if (ttft_bound_ms is None or first <= ttft_bound_ms * 1e6) and (
                tpot_bound_ms is None or per_token <= tpot_bound_ms * 1e6
            ):
                met += 1
        goodput = met / (duration / 1e9)
    served = record.served
    reported = [(r.output_tokens, r.reported_tokens) for r in requests if r.reported_tokens]
    difference = None
    if reported:
        server_total = sum(b for _, b in reported)
        difference = (sum(a for a, _ in reported) - server_total) / server_total
    lag_p99 = None
    if served is not None and served.client_lag_ns:
        lag_p99 = float(np.percentile(np.asarray(served.client_lag_ns), 99)) / 1e6
    return GenerationSummary(
        timed=record.timed,
        definitions=dict(SERVED_METRICS if record.timed == "chunk" else GENERATION_METRICS),
        failures=dict(served.failures) if served is not None else {},
        token_count_difference=difference,
        client_lag_p99_ms=lag_p99,
        requests=len(requests),
        goodput_per_s=goodput,
        input_tokens_mean=float(np.mean([r.input_tokens for r in requests])),
        output_tokens_mean=output_tokens / len(requests),
        ttft=stats(ttft),
        tpot=stats(tpot) if tpot else None,
        itl=stats(gaps) if gaps.size else None,
        e2e=stats(e2e),
        output_tokens_per_s=output_tokens / (duration / 1e9),
        requests_per_s=len(requests) / (duration / 1e9),
    )


def judge_tokens(summary: GenerationSummary, scenario: Scenario) -> list[Reason]:
    """What the scenario's TTFT and TPOT bounds say of ``summary`` at its ``slo_percentile``
    (p99 unless set): above its bound misses it (an error, even when the percentile is only a
    bound: the true one is at least that); at or below it from too few requests cannot show
    it is met (a warning)."""
    reasons = []
    label = f"p{scenario.slo_percentile * 100:g}"
    checks = (
        ("TTFT", summary.ttft, scenario.ttft_bound_ms, ReasonCode.TTFT_BOUND_MISSED),
        ("TPOT", summary.tpot, scenario.tpot_bound_ms, ReasonCode.TPOT_BOUND_MISSED),
    )
    for name, statistics, bound_ms, code in checks:
        if bound_ms is None or statistics is None:
            continue
        p99 = statistics.percentile(scenario.slo_percentile)
        value_ms = p99.value_ns / 1e6
        if value_ms > bound_ms:
            reasons.append(
                Reason(
                    code=code,
                    severity=Severity.ERROR,
                    message=f"{label} {name} {value_ms:.2f} ms exceeds the bound of "
                    f"{bound_ms:g} ms",
                    measured=value_ms,
                    limit=bound_ms,
                )
            )
        elif p99.kind == "bound":
            reasons.append(
                Reason(
                    code=ReasonCode.TOKEN_BOUND_UNPROVEN,
                    severity=Severity.WARNING,
                    message=f"{label} {name} {value_ms:.2f} ms is within {bound_ms:g} ms, but "
                    f"from {statistics.count} values, fewer than the {p99.min_queries} a {label} "
                    "needs: meeting the bound is not shown",
                    measured=value_ms,
                    limit=bound_ms,
                )
            )
    return reasons


def judge_served(summary: GenerationSummary) -> list[Reason]:
    """What a served model's run says of itself: failed requests (an error past
    ``MAX_FAILED_FRACTION``, else a warning), a client that issued late (an error: the load
    was not the scenario's), token counts that disagree with the server's (a warning)."""
    reasons = []
    failed = sum(summary.failures.values())
    if failed:
        total = failed + summary.requests
        fraction = failed / total
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.failures.items()))
        reasons.append(
            Reason(
                code=ReasonCode.REQUESTS_FAILED,
                severity=Severity.ERROR if fraction > MAX_FAILED_FRACTION else Severity.WARNING,
                message=f"{failed} of {total} timed requests failed ({kinds}); failed requests "
                f"are not latency samples (at most {MAX_FAILED_FRACTION:.0%} may fail)",
                measured=fraction,
                limit=MAX_FAILED_FRACTION,
            )
        )
    if summary.client_lag_p99_ms is not None:
        median_ttft_ms = summary.ttft.percentile(0.5).value_ns / 1e6
        limit_ms = max(LAG_FLOOR_NS / 1e6, MAX_LAG_FRACTION * median_ttft_ms)
        if summary.client_lag_p99_ms > limit_ms:
            reasons.append(
                Reason(
                    code=ReasonCode.LOAD_GENERATOR_LATE,
                    severity=Severity.ERROR,
                    message=f"the client issued requests late: p99 lag "
                    f"{summary.client_lag_p99_ms:.2f} ms past their scheduled times, above "
                    f"{limit_ms:.2f} ms ({MAX_LAG_FRACTION:.0%} of the median TTFT): the server "
                    "was offered less than the scenario's load",
                    measured=summary.client_lag_p99_ms,
                    limit=limit_ms,
                )
            )
    difference = summary.token_count_difference
    if difference is not None and abs(difference) > TOKEN_COUNT_TOLERANCE:
        reasons.append(
            Reason(
                code=ReasonCode.TOKEN_COUNTS_DISAGREE,
                severity=Severity.WARNING,
                message=f"the model's tokenizer counts {difference:+.1%} output tokens against "
                f"the server's usage (tolerance {TOKEN_COUNT_TOLERANCE:.0%}): per-token figures "
                "depend on which count is right",
                measured=difference,
                limit=TOKEN_COUNT_TOLERANCE,
            )
        )
    return reasons
