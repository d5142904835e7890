"""The goodput search: doubling then bisecting, each probe judged with its interval."""

from __future__ import annotations

import pytest

from shared.measurement.generation import summarize_generation
from shared.measurement.goodput import (
    Judgement,
    Outcome,
    disturbance,
    goodput_search,
    judge_probe,
    rate_search,
)
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    Reason,
    ReasonCode,
    Severity,
    Verdict,
)

MS = 1_000_000


def _summary(count: int, ttft_ms: float, spread_ms: float = 5.0) -> object:
    # TTFTs spread evenly over [ttft_ms, ttft_ms + spread_ms).
    requests = [
        GeneratedRequest(
            scheduled_ns=i * 1000 * MS,
            issued_ns=i * 1000 * MS,
            token_ns=[
                int(i * 1000 * MS + (ttft_ms + (i % 101) * spread_ms / 101) * MS + k * 10 * MS)
                for k in range(3)
            ],
            input_tokens=5,
            stopped_by="max_new_tokens",
        )
        for i in range(count)
    ]
    record = GenerationRecord(
        max_new_tokens=3, ignore_eos=True, duration_ns=count * 1000 * MS, requests=requests
    )
    return summarize_generation(record, headline_percentile=0.9)


@pytest.mark.parametrize(
    ("ttft_ms", "count", "expected"),
    [
        (50.0, 200, "meets"),  # every value, and so the interval, well within 100 ms
        (150.0, 200, "misses"),  # the interval above the bound
        (95.5, 200, "indeterminate"),  # p90 99.9 ms, its interval [99.7, 100.1] straddles 100
        (50.0, 20, "indeterminate"),  # within, but p90 from 20 requests is only a bound
        (150.0, 20, "misses"),  # a bound already beyond: the true p90 is at least that
    ],
)
def test_a_probe_is_judged_by_its_interval_not_its_point(
    ttft_ms: float, count: int, expected: Judgement
) -> None:
    judgement, reason = judge_probe(
        _summary(count, ttft_ms), ttft_bound_ms=100.0, tpot_bound_ms=None, percentile=0.9
    )
    assert judgement == expected, reason
    assert "p90 TTFT" in reason


def _limit(largest_meeting: int, calls: list[int]) -> object:
    def probe(concurrency: int) -> tuple[Judgement, str]:
        calls.append(concurrency)
        return ("meets", "") if concurrency <= largest_meeting else ("misses", "too slow")

    return probe


def test_the_search_doubles_then_bisects_to_the_exact_load() -> None:
    calls: list[int] = []
    found = goodput_search(_limit(5, calls), max_concurrency=64)
    assert calls == [1, 2, 4, 8, 6, 5]
    assert (found.found, found.below, found.exact) == (5, 6, True)


def test_a_load_no_stream_meets_is_found_as_zero() -> None:
    found = goodput_search(_limit(0, []), max_concurrency=64)
    assert (found.found, found.below, found.exact) == (0, 1, True)


def test_every_load_meeting_stops_at_the_largest_asked() -> None:
    calls: list[int] = []
    found = goodput_search(_limit(1000, calls), max_concurrency=10)
    assert calls == [1, 2, 4, 8, 10]
    assert (found.found, found.below) == (10, None)


def test_an_indeterminate_probe_stops_the_search_saying_where_the_answer_lies() -> None:
    def probe(concurrency: int) -> tuple[Judgement, str]:
        if concurrency <= 4:
            return "meets", ""
        if concurrency == 6:
            return "indeterminate", "straddles"
        return "misses", ""

    found = goodput_search(probe, max_concurrency=64)
    assert [p.load for p in found.probes] == [1, 2, 4, 8, 6]
    assert (found.found, found.below, found.unresolved, found.exact) == (4, 8, 6, False)


def _rate_limit(highest_meeting: float, calls: list[float]) -> object:
    def probe(rate: float) -> tuple[Judgement, str]:
        calls.append(rate)
        return ("meets", "") if rate <= highest_meeting else ("misses", "too slow")

    return probe


def test_the_rate_search_doubles_then_bisects_to_within_its_resolution() -> None:
    calls: list[float] = []
    found = rate_search(_rate_limit(5.3, calls), start=1.0, max_rate=100, resolution=0.1)
    assert calls[:4] == [1.0, 2.0, 4.0, 8.0]
    assert calls[4:] == [6.0, 5.0, 5.5]
    assert (found.found, found.below, found.exact) == (5.0, 5.5, True)
    assert found.found <= 5.3 < found.below


def test_a_start_rate_that_misses_is_halved_until_one_meets() -> None:
    calls: list[float] = []
    found = rate_search(_rate_limit(0.3, calls), start=2.0, max_rate=100, resolution=0.25)
    assert calls[:4] == [2.0, 1.0, 0.5, 0.25]
    assert found.found <= 0.3 < found.below  # type: ignore[operator]
    assert found.below <= found.found * 1.25  # type: ignore[operator]
    assert found.exact


def test_a_rate_no_halving_meets_is_not_claimed() -> None:
    found = rate_search(_rate_limit(0.0, []), start=1.0, max_rate=100)
    assert found.found == 0
    assert found.below == 1.0 / 2**6
    assert not found.exact


def _reason(code: ReasonCode, severity: Severity = Severity.ERROR) -> Reason:
    return Reason(code=code, severity=severity, message=f"{code.value} happened")


def test_a_probe_invalid_beyond_its_bounds_is_disturbed() -> None:
    missed = Verdict(status="INVALID", reasons=(_reason(ReasonCode.TTFT_BOUND_MISSED),))
    assert disturbance(missed) is None, "missing a bound is the probe's answer, not a disturbance"
    busy = Verdict(
        status="INVALID",
        reasons=(
            _reason(ReasonCode.TPOT_BOUND_MISSED),
            _reason(ReasonCode.OTHER_PROCESSES_USED_CPU),
            _reason(ReasonCode.REQUESTS_FAILED),
            _reason(ReasonCode.STEADY_WINDOW_SHORT, Severity.WARNING),
        ),
    )
    said = disturbance(busy)
    assert said is not None
    assert said.startswith("other_processes_used_cpu: ")
    assert "requests_failed" in said
    assert "tpot_bound_missed" not in said
    assert "steady_window_short" not in said
    assert disturbance(Verdict(status="VALID", reasons=())) is None


def test_a_disturbed_probe_is_measured_once_more_before_the_search_decides() -> None:
    calls: list[int] = []

    def probe(concurrency: int) -> Outcome:
        calls.append(concurrency)
        first_at_4 = concurrency == 4 and calls.count(4) == 1
        disturbed = "other_processes_used_cpu: 1.4 of 2 cores" if first_at_4 else None
        judgement: Judgement = "meets" if concurrency <= 5 else "misses"
        return judgement, "", disturbed

    found = goodput_search(probe, max_concurrency=64)
    assert calls == [1, 2, 4, 4, 8, 6, 5]
    assert (found.found, found.below, found.exact) == (5, 6, True)
    first, again = (p for p in found.probes if p.load == 4)
    assert first.disturbed is not None
    assert not first.remeasured
    assert again.disturbed is None
    assert again.remeasured
    assert found.disturbed == []


def test_a_probe_disturbed_twice_stops_the_search_its_answer_uncertain() -> None:
    calls: list[float] = []

    def probe(rate: float) -> Outcome:
        calls.append(rate)
        if rate >= 4:
            return "meets", "", "load_generator_late: p99 lag 9 ms"  # a decision never made
        return "meets", "", None

    found = rate_search(probe, start=1.0, max_rate=64)
    assert calls == [1.0, 2.0, 4.0, 4.0]
    assert (found.found, found.below, found.unresolved) == (2.0, None, 4.0)
    assert [p.load for p in found.disturbed] == [4.0]
    assert found.disturbed[0].disturbed == "load_generator_late: p99 lag 9 ms"
    assert not found.exact
