"""The client's own lateness: recorded (p50, p99 and max) in open and closed loops, and judged
by a rule whose floor follows the schedule's gaps as well as the TTFT, so a well-kept schedule
against a fast server is not condemned while a client that falls behind is."""

from __future__ import annotations

import pytest

from shared.measurement.generation import judge_served, summarize_generation
from shared.measurement.lag import (
    LAG_FLOOR_NS,
    MAX_LAG_FRACTION,
    SATURATED_CORES,
    judge_client,
    judge_lag,
)
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    MachineWindow,
    ReasonCode,
    ServedRun,
    Severity,
)

MS = 1_000_000


def _open_loop(lags_ms: list[float], *, gap_ms: float, ttft_ms: float) -> GenerationRecord:
    """Requests scheduled ``gap_ms`` apart, each issued its lag late, its first chunk
    ``ttft_ms`` after its scheduled time and three more 1 ms apart."""
    requests = []
    for i, lag in enumerate(lags_ms):
        scheduled = int(i * gap_ms * MS)
        first = scheduled + int(ttft_ms * MS)
        requests.append(
            GeneratedRequest(
                scheduled_ns=scheduled,
                issued_ns=scheduled + int(lag * MS),
                token_ns=[first + k * MS for k in range(4)],
                input_tokens=10,
                stopped_by="max_new_tokens",
                counted_tokens=4,
            )
        )
    return GenerationRecord(
        max_new_tokens=4,
        ignore_eos=True,
        duration_ns=int(len(lags_ms) * gap_ms * MS),
        requests=requests,
        timed="chunk",
        served=ServedRun(
            url="http://127.0.0.1:8000/v1",
            model="smollm2",
            api="completions",
            client_lag_ns=[int(lag * MS) for lag in lags_ms],
        ),
        load="open",
    )


def test_a_well_kept_schedule_against_a_fast_server_is_not_condemned() -> None:
    # The case: 50 requests/s (20 ms between arrivals) against a server answering in
    # 3 ms, the client's p99 lag 2.9 ms, its median a tenth of a millisecond.
    lags = [0.1] * 980 + [2.9] * 20
    summary = summarize_generation(_open_loop(lags, gap_ms=20, ttft_ms=3))
    lag = summary.client_lag
    assert lag is not None
    assert lag.loop == "open"
    assert (lag.p50_ms, lag.max_ms) == pytest.approx((0.1, 2.9))
    assert lag.p99_ms == pytest.approx(2.9, abs=0.1)
    assert lag.mean_gap_ms == pytest.approx(20)
    # The old rule's limit (5 % of the TTFT, at least 1 ms) condemned it...
    assert lag.p99_ms > max(LAG_FLOOR_NS / MS, MAX_LAG_FRACTION * 3)
    # ... a quarter of the 20 ms gap does not: the schedule itself varies by its mean.
    assert judge_lag(summary) is None
    assert judge_served(summary) == []


def test_a_client_behind_its_schedule_in_the_tail_is_condemned() -> None:
    lags = [0.1] * 950 + [9.0] * 50  # p99 9 ms, beyond a quarter of the 20 ms gap
    late = judge_lag(summarize_generation(_open_loop(lags, gap_ms=20, ttft_ms=3)))
    assert late is not None
    assert late.code is ReasonCode.LOAD_GENERATOR_LATE
    assert late.severity is Severity.ERROR
    assert late.measured == pytest.approx(9.0)
    assert late.limit == pytest.approx(5.0)
    assert "mean gap between arrivals" in late.message


def test_a_client_late_as_a_rule_is_condemned_whatever_the_gaps() -> None:
    # Every request 4 ms late against a 50 ms TTFT: every TTFT carries 8 % of the client's.
    late = judge_lag(summarize_generation(_open_loop([4.0] * 200, gap_ms=1000, ttft_ms=50)))
    assert late is not None
    assert late.measured == pytest.approx(4.0)
    assert late.limit == pytest.approx(2.5)
    assert "every TTFT carries it" in late.message


def _closed_loop(delays_ms: list[float], e2e_ms: float = 40.0) -> GenerationRecord:
    requests = [
        GeneratedRequest(
            scheduled_ns=int(i * e2e_ms * MS),
            issued_ns=int(i * e2e_ms * MS),
            token_ns=[int((i * e2e_ms + 10 + k * 10) * MS) for k in range(4)],
            input_tokens=10,
            stopped_by="max_new_tokens",
        )
        for i in range(len(delays_ms) + 1)
    ]
    return GenerationRecord(
        max_new_tokens=4,
        ignore_eos=True,
        duration_ns=int((len(delays_ms) + 1) * e2e_ms * MS),
        requests=requests,
        load="closed",
        streams=1,
        client_delay_ns=[int(d * MS) for d in delays_ms],
    )


def test_closed_loops_record_the_clients_delay_between_a_streams_requests() -> None:
    summary = summarize_generation(_closed_loop([0.2] * 98 + [0.9, 3.0]))
    lag = summary.client_lag
    assert lag is not None
    assert lag.loop == "closed"
    assert lag.count == 100
    assert lag.p50_ms == pytest.approx(0.2)
    assert lag.max_ms == pytest.approx(3.0)
    assert "previous request was done" in lag.definition
    assert judge_lag(summary) is None


def test_streams_that_idle_between_requests_through_the_client_are_condemned() -> None:
    late = judge_lag(summarize_generation(_closed_loop([6.0] * 50)))  # 6 ms a 40 ms request
    assert late is not None
    assert late.code is ReasonCode.LOAD_GENERATOR_LATE
    assert "streams idled" in late.message
    assert late.limit == pytest.approx(2.0)  # 5 % of the 40 ms median E2E


def _window(loop_cpu_s: float, duration_s: float) -> MachineWindow:
    # The process's figure counts a local server's CPU too: the client's is its loop's.
    return MachineWindow(
        started_at_ns=0,
        ended_at_ns=int(duration_s * 1e9),
        duration_ns=int(duration_s * 1e9),
        cpus=2,
        own_cpu_s=loop_cpu_s + 1.5 * duration_s,
        thread_cpu_s=loop_cpu_s,
    )


def test_a_served_run_says_what_its_client_cost_per_request() -> None:
    # 200 requests over 4 s, the client's process busy 0.1 s of it.
    record = _open_loop([0.1] * 200, gap_ms=20, ttft_ms=3)
    summary = summarize_generation(record, window=_window(0.1, 4.0))
    client = summary.client
    assert client is not None
    assert client.cores == pytest.approx(0.025)
    assert client.cpu_per_request_ms == pytest.approx(0.5)
    assert not client.saturated
    assert judge_client(summary) is None
    # A model run in process has no client apart from the model: its process's CPU is the
    # model's, so no client cost is claimed for it.
    in_process = record.model_copy(update={"served": None, "timed": "token"})
    assert summarize_generation(in_process, window=_window(0.1, 4.0)).client is None
    # A window that kept no thread's figure (an event recorded before it did) claims none.
    old = _window(0.1, 4.0).model_copy(update={"thread_cpu_s": None})
    assert summarize_generation(record, window=old).client is None


def test_a_client_whose_loop_was_saturated_is_named_as_the_limit() -> None:
    # The schedule was kept (the lag rule passes), yet the client was busy 0.95 of a core.
    summary = summarize_generation(
        _open_loop([0.1] * 200, gap_ms=20, ttft_ms=3), window=_window(3.8, 4.0)
    )
    assert judge_lag(summary) is None
    saturated = judge_client(summary)
    assert saturated is not None
    assert saturated.code is ReasonCode.CLIENT_SATURATED
    assert saturated.severity is Severity.WARNING
    assert saturated.measured == pytest.approx(0.95)
    assert saturated.limit == SATURATED_CORES
    assert "the client, not the server, was the limit" in saturated.message
    assert [r.code for r in judge_served(summary)] == [ReasonCode.CLIENT_SATURATED]
