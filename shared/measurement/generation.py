"""Token-level statistics of a generative evaluation, from its raw record: TTFT, TPOT,
inter-token latency, E2E and throughput, each as ``shared.messages.generation`` defines it and
each with the intervals and the sufficiency rule of every dlscope percentile."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from shared.measurement.finish import TOKEN_COUNT_TOLERANCE, TRUNCATED
from shared.measurement.lag import (
    LAG_FLOOR_NS,
    MAX_LAG_FRACTION,
    client_cost,
    client_lag,
    judge_client,
    judge_lag,
)
from shared.measurement.statistics import summarize_latencies
from shared.measurement.steady import steady_window
from shared.messages import (
    GENERATION_METRICS,
    SERVED_METRICS,
    GeneratedRequest,
    GenerationRecord,
    GenerationSummary,
    LatencyStatistics,
    MachineWindow,
    Reason,
    ReasonCode,
    Scenario,
    Severity,
)

__all__ = [
    "LAG_FLOOR_NS",
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
# What a truncated request is, where the failures count some.
_TRUNCATED_SAID = (
    f"; {TRUNCATED}: answers that ended before the length the run pinned, so they did less "
    "work than the others (shared.measurement.finish)"
)


def summarize_generation(
    record: GenerationRecord,
    *,
    headline_percentile: float = 0.99,
    seed: int = 0,
    ttft_bound_ms: float | None = None,
    tpot_bound_ms: float | None = None,
    e2e_bound_ms: float | None = None,
    issue_delays_ns: tuple[int, ...] = (),
    window: MachineWindow | None = None,
) -> GenerationSummary:
    """The statistics of ``record``'s timed requests; each metric's headline (the one with a
    bootstrap interval besides the median) is ``headline_percentile``, the percentile the
    bounds judge. With a bound, goodput: the requests that met every bound, per second. The
    client's lag (``lag.client_lag``: the open loop's from ``issue_delays_ns`` where the
    record keeps none), a served model's client's own CPU over the timed phase ``window``
    (``lag.client_cost``) and the steady-state window (``steady``) beside them."""
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

    def stats(values: Sequence[float] | np.ndarray) -> LatencyStatistics:
        return summarize_latencies(
            np.rint(np.asarray(values, dtype=np.float64)).astype(np.int64),
            duration_ns=duration,
            headline_percentile=headline_percentile,
            seed=seed,
        )

    met = _met_bounds(requests, ttft, e2e, (ttft_bound_ms, tpot_bound_ms, e2e_bound_ms))
    # A sampled record (a run too long to keep every token's time): the statistics are the
    # sample's, the counts and rates every request's, goodput the sample's share met of all.
    sampled, timed = record.sampled, record.request_count
    if sampled and record.output_tokens is not None:
        output_tokens = record.output_tokens
    met_share = None if met is None else met / len(requests)
    served = record.served
    lag = client_lag(record, issue_delays_ns)
    return GenerationSummary(
        timed=record.timed,
        definitions=dict(SERVED_METRICS if record.timed == "chunk" else GENERATION_METRICS),
        failures=dict(served.failures) if served is not None else {},
        token_count_difference=_count_difference(requests),
        client_lag_p99_ms=None if lag is None else lag.p99_ms,
        client_lag=lag,
        client=client_cost(record, window),
        sampled_requests=len(requests) if sampled else None,
        requests=timed,
        goodput_per_s=None if met_share is None else met_share * timed / (duration / 1e9),
        input_tokens_mean=float(np.mean([r.input_tokens for r in requests])),
        output_tokens_mean=output_tokens / timed,
        ttft=stats(ttft),
        tpot=stats(tpot) if tpot else None,
        itl=stats(gaps) if gaps.size else None,
        e2e=stats(e2e),
        output_tokens_per_s=output_tokens / (duration / 1e9),
        requests_per_s=timed / (duration / 1e9),
        # The window is where every stream had a request in flight: a sample cannot say.
        steady=None if sampled else steady_window(record, stats),
    )


def _met_bounds(
    requests: Sequence[GeneratedRequest],
    ttft: Sequence[int],
    e2e: Sequence[int],
    bounds_ms: tuple[float | None, float | None, float | None],
) -> int | None:
    """How many requests met every bound given on their own TTFT, TPOT and E2E; None
    without a bound."""
    if all(bound is None for bound in bounds_ms):
        return None
    ttft_ns, tpot_ns, e2e_ns = (math.inf if b is None else b * 1e6 for b in bounds_ms)
    met = 0
    for r, first, end in zip(requests, ttft, e2e, strict=True):
        per_token = (end - first) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        met += first <= ttft_ns and per_token <= tpot_ns and end <= e2e_ns
    return met


def _count_difference(requests: Sequence[GeneratedRequest]) -> float | None:
    """(tokenizer's output tokens - server's) / server's, where the server counted."""
    reported = [(r.output_tokens, r.reported_tokens) for r in requests if r.reported_tokens]
    if not reported:
        return None
    server_total = sum(b for _, b in reported)
    return (sum(a for a, _ in reported) - server_total) / server_total


def judge_tokens(summary: GenerationSummary, scenario: Scenario) -> list[Reason]:
    """What the scenario's TTFT, TPOT and E2E bounds say of ``summary`` at its ``slo_percentile``
    (p99 unless set): above its bound misses it (an error, even when the percentile is only a
    bound: the true one is at least that); at or below it from too few requests cannot show
    it is met (a warning)."""
    reasons = []
    label = f"p{scenario.slo_percentile * 100:g}"
    checks = (
        ("TTFT", summary.ttft, scenario.ttft_bound_ms, ReasonCode.TTFT_BOUND_MISSED),
        ("TPOT", summary.tpot, scenario.tpot_bound_ms, ReasonCode.TPOT_BOUND_MISSED),
        ("E2E", summary.e2e, scenario.e2e_bound_ms, ReasonCode.E2E_BOUND_MISSED),
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
    """What a run of requests says of itself: failed requests (an error past
    ``MAX_FAILED_FRACTION``, else a warning), a client that issued late (an error: the load
    was not the scenario's; ``lag``), a client whose own loop was saturated (a warning: it,
    not the server, was the limit), token counts that disagree with the server's (a
    warning)."""
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
                f"are not latency samples (at most {MAX_FAILED_FRACTION:.0%} may fail)"
                + _TRUNCATED_SAID
                * (TRUNCATED in summary.failures),
                measured=fraction,
                limit=MAX_FAILED_FRACTION,
            )
        )
    if (late := judge_lag(summary)) is not None:
        reasons.append(late)
    if (saturated := judge_client(summary)) is not None:
        reasons.append(saturated)
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
