"""A generation's record stays a size every consumer reads however long the run: past a bound
on token times it keeps a uniform, seeded sample of the timed requests and counts every
request and output token apart, so rates and goodput stay exact and the statistics say they
are a sample's."""

from __future__ import annotations

import pytest

from services.workers.framework.ports import Generated
from services.workers.framework.sessions.tokens import bounded_record
from shared.measurement.generation import summarize_generation
from shared.messages import GenerationRecord

MS = 1_000_000


def _generated(count: int, tokens: int, *, slow_every: int = 0) -> list[Generated]:
    """``count`` requests 10 ms apart, each ``tokens`` chunks 1 ms apart after 5 ms (50 ms
    for every ``slow_every``-th)."""
    made = []
    for i in range(count):
        issued = i * 10 * MS
        first = issued + (50 if slow_every and i % slow_every == 0 else 5) * MS
        made.append(
            Generated(
                issued_ns=issued,
                prompt_tokens=4,
                tokens=list(range(tokens)),
                token_ns=[first + k * MS for k in range(tokens)],
                stopped_by="max_new_tokens",
                chunks=True,
            )
        )
    return made


def _bounded(
    generated: list[Generated], max_times: int, seed: int = 0
) -> tuple[GenerationRecord, list[int]]:
    lags = [i % 7 for i in range(len(generated))]
    recorded, kept = bounded_record(
        generated,
        lags,
        scheduled_ns=None,
        duration_ns=len(generated) * 10 * MS,
        max_new_tokens=8,
        ignore_eos=True,
        seed=seed,
        max_times=max_times,
    )
    return recorded.model_copy(update={"load": "closed", "streams": 1}), kept


def test_a_run_within_the_bound_keeps_every_request() -> None:
    generated = _generated(50, 8)
    recorded, lags = _bounded(generated, max_times=400)
    assert len(recorded.requests) == 50
    assert not recorded.sampled
    assert recorded.timed_requests is None
    assert lags == [i % 7 for i in range(50)]


def test_a_run_past_the_bound_keeps_a_seeded_sample_and_counts_everything() -> None:
    generated = _generated(1000, 8)  # 8 000 times against a bound of 800: a tenth kept
    recorded, lags = _bounded(generated, max_times=800)
    assert recorded.sampled
    assert len(recorded.requests) == 100
    assert sum(len(r.token_ns) for r in recorded.requests) <= 800
    assert (recorded.timed_requests, recorded.output_tokens) == (1000, 8000)
    assert recorded.request_count == 1000
    # In their order, each kept request with its own lag, and the same sample every time.
    issued = [r.issued_ns for r in recorded.requests]
    assert issued == sorted(issued)
    assert lags == [(r.issued_ns // (10 * MS)) % 7 for r in recorded.requests]
    again, _ = _bounded(generated, max_times=800)
    assert again == recorded
    other, _ = _bounded(generated, max_times=800, seed=1)
    assert other.requests != recorded.requests


def test_a_sampled_record_gives_exact_rates_and_says_its_statistics_are_a_samples() -> None:
    generated = _generated(2000, 8, slow_every=10)  # a tenth of the TTFTs are 50 ms
    recorded, _ = _bounded(generated, max_times=1600)
    summary = summarize_generation(recorded, ttft_bound_ms=20)
    assert summary.sampled_requests == len(recorded.requests) == 200
    assert summary.requests == 2000
    duration_s = 2000 * 10 * MS / 1e9
    assert summary.requests_per_s == pytest.approx(2000 / duration_s)
    assert summary.output_tokens_per_s == pytest.approx(16000 / duration_s)
    assert summary.output_tokens_mean == 8
    # The statistics stand on the sample: its TTFTs, as many as it holds.
    assert summary.ttft.count == 200
    assert summary.ttft.percentile(0.5).value_ns == 5 * MS
    # Goodput: the sample's share that met the bound, of every request.
    met = sum(r.token_ns[0] - r.scheduled_ns <= 20 * MS for r in recorded.requests)
    assert summary.goodput_per_s == pytest.approx(met / 200 * 2000 / duration_s)
    assert summary.steady is None  # no sample can say when every stream was in flight
    whole = summarize_generation(_bounded(generated, max_times=10**6)[0], ttft_bound_ms=20)
    assert whole.sampled_requests is None
    assert whole.steady is not None
    assert whole.goodput_per_s == pytest.approx(1800 / duration_s)
