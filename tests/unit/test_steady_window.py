"""Throughput and token latencies over the steady-state window, where the client held its
full concurrency or rate, the ramp-up and the drain left out; the whole run's figures kept
beside them, and a warning when the window is short."""

from __future__ import annotations

import pytest

from shared.measurement.generation import summarize_generation
from shared.measurement.steady import judge_steady
from shared.messages import GeneratedRequest, GenerationRecord, ReasonCode, Severity

MS = 1_000_000


def _request(start_ms: float, *, tokens: int = 10, step_ms: float = 20) -> GeneratedRequest:
    start = int(start_ms * MS)
    return GeneratedRequest(
        scheduled_ns=start,
        issued_ns=start,
        token_ns=[start + int((k + 1) * step_ms * MS) for k in range(tokens)],
        input_tokens=8,
        stopped_by="max_new_tokens",
    )


def _streams(streams: int, per_stream: int, *, stagger_ms: float) -> GenerationRecord:
    """``streams`` closed loops of 200 ms requests (10 tokens 20 ms apart), stream k starting
    ``k * stagger_ms`` late: a ramp-up, and a drain as the late streams finish last."""
    requests = [
        _request(k * stagger_ms + i * 200) for k in range(streams) for i in range(per_stream)
    ]
    end = max(r.token_ns[-1] for r in requests)
    return GenerationRecord(
        max_new_tokens=10,
        ignore_eos=True,
        duration_ns=end,
        requests=sorted(requests, key=lambda r: r.token_ns[-1]),
        load="closed",
        streams=streams,
    )


def test_closed_loops_are_measured_while_every_stream_has_a_request_in_flight() -> None:
    summary = summarize_generation(_streams(4, 50, stagger_ms=100))
    steady = summary.steady
    assert steady is not None
    # From the fourth stream's first request (300 ms) to the first stream's last end (10 s).
    assert (steady.start_ns, steady.end_ns) == (300 * MS, 10_000 * MS)
    assert "4 streams" in steady.held
    # Four streams of 10 tokens each 200 ms: 200 tokens/s while all four run; the whole run,
    # ramp and drain included, is slower.
    assert steady.output_tokens_per_s == pytest.approx(200, rel=0.01)
    assert summary.output_tokens_per_s < steady.output_tokens_per_s
    assert steady.requests_per_s == pytest.approx(20, rel=0.02)
    assert steady.ttft is not None
    assert steady.ttft.median.value_ns == 20 * MS
    assert not steady.short
    assert judge_steady(summary) is None


def test_an_open_loop_leaves_out_one_median_e2e_of_ramp_up_and_the_drain() -> None:
    requests = [_request(i * 100.0, tokens=25) for i in range(40)]  # 500 ms each, 10/s
    record = GenerationRecord(
        max_new_tokens=25,
        ignore_eos=True,
        duration_ns=requests[-1].token_ns[-1],
        requests=requests,
        load="open",
    )
    steady = summarize_generation(record).steady
    assert steady is not None
    assert (steady.start_ns, steady.end_ns) == (500 * MS, 3_900 * MS)
    assert steady.requests == 30  # scheduled from 500 ms to 3.4 s, done by 3.9 s
    assert steady.output_tokens_per_s == pytest.approx(250, rel=0.02)  # 5 in flight x 50/s


def test_a_window_too_short_to_stand_for_the_load_is_a_warning() -> None:
    # Four streams started 300 ms apart, two requests each: all four run together briefly.
    summary = summarize_generation(_streams(4, 2, stagger_ms=100))
    steady = summary.steady
    assert steady is not None
    assert steady.short
    warning = judge_steady(summary)
    assert warning is not None
    assert warning.code is ReasonCode.STEADY_WINDOW_SHORT
    assert warning.severity is Severity.WARNING
    assert "run longer" in warning.message
    # The whole run's figures are still there.
    assert summary.requests == 8
    assert summary.output_tokens_per_s > 0


def test_one_stream_holds_its_load_over_the_whole_run() -> None:
    summary = summarize_generation(_streams(1, 6, stagger_ms=0))
    steady = summary.steady
    assert steady is not None
    assert steady.share == pytest.approx(1.0)
    assert steady.requests == 6
    assert not steady.short
