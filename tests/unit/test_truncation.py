"""A pinned-length request that ends short is a failure of its own kind, ``truncated``: the
rule both endpoint clients apply (the server's count first, the tokenizer's within a
tolerance, a server that says it stopped itself), counted beside the other failures and past
the bound making the run INVALID with the reason."""

from __future__ import annotations

import pytest

from shared.measurement.finish import TOKEN_COUNT_TOLERANCE, TRUNCATED, truncation
from shared.measurement.generation import judge_served, summarize_generation
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    ReasonCode,
    ServedRun,
    Severity,
)


def _ended(
    counted: int,
    *,
    reported: int | None = None,
    reason: str | None = "length",
    pinned: bool = True,
    asked: int = 32,
) -> str | None:
    return truncation(
        pinned=pinned,
        max_new_tokens=asked,
        finish_reason=reason,
        reported_tokens=reported,
        counted_tokens=counted,
    )


def test_an_answer_at_its_pinned_length_is_a_sample() -> None:
    assert _ended(32, reported=32) is None
    assert _ended(32) is None  # no usage: the tokenizer's count
    assert _ended(32, reason=None) is None  # no finish reason is no evidence either way


def test_llama_cpp_pythons_interrupted_answer_is_truncated() -> None:
    # What llama-cpp-python's server sends when the next request arrives: [DONE] after a
    # token or two, no finish reason, no usage.
    cause = _ended(2, reason=None)
    assert cause is not None
    assert "2 of the 32 tokens pinned" in cause
    assert "tokenizer" in cause
    assert "no finish reason" in cause


def test_the_servers_own_count_decides_where_it_sends_one() -> None:
    cause = _ended(32, reported=31)  # the text re-tokenized looks whole; the server says not
    assert cause is not None
    assert "by the server's usage" in cause
    assert _ended(30, reported=32) is None  # the server generated them all


def test_the_tokenizers_count_has_a_tolerance_for_re_tokenized_text() -> None:
    # A text re-tokenized may merge two generated tokens: within 2 % (at least one token),
    # short; beyond, truncated.
    slack = max(1, int(TOKEN_COUNT_TOLERANCE * 256))
    assert _ended(256 - slack, asked=256) is None
    assert _ended(256 - slack - 1, asked=256) is not None
    assert _ended(31) is None
    assert _ended(30) is not None
    assert _ended(3, asked=4) is None
    assert _ended(2, asked=4) is not None


def test_a_server_that_says_it_stopped_itself_did_not_run_to_the_pinned_length() -> None:
    cause = _ended(32, reason="stop")
    assert cause is not None
    assert "ended the answer itself" in cause
    assert _ended(32, reason="abort") is not None


def test_an_answer_whose_length_was_not_pinned_is_never_truncated() -> None:
    assert _ended(2, reason="stop", pinned=False) is None
    assert _ended(2, reported=2, reason=None, pinned=False) is None


def _record(samples: int, failures: dict[str, int]) -> GenerationRecord:
    ms = 1_000_000
    return GenerationRecord(
        max_new_tokens=16,
        ignore_eos=True,
        duration_ns=samples * 100 * ms,
        requests=[
            GeneratedRequest(
                scheduled_ns=i * 100 * ms,
                issued_ns=i * 100 * ms,
                token_ns=[i * 100 * ms + (20 + k) * ms for k in range(16)],
                input_tokens=8,
                stopped_by="max_new_tokens",
                counted_tokens=16,
                finish_reason="length",
            )
            for i in range(samples)
        ],
        timed="chunk",
        served=ServedRun(
            url="http://127.0.0.1:8000/v1", model="smollm2", api="completions", failures=failures
        ),
    )


def test_truncated_requests_count_beside_the_other_failures_and_past_the_bound_invalidate() -> None:
    summary = summarize_generation(_record(10, {TRUNCATED: 22, "timeout": 1}), ttft_bound_ms=1e4)
    assert summary.failures == {TRUNCATED: 22, "timeout": 1}
    assert summary.requests == 10, "a truncated request is never a latency sample"
    # Goodput counts the requests that met the bounds: never the truncated ones.
    assert summary.goodput_per_s == pytest.approx(10 / 1.0)
    (failed,) = judge_served(summary)
    assert failed.code is ReasonCode.REQUESTS_FAILED
    assert failed.severity is Severity.ERROR
    assert "23 of 33 timed requests failed (1 timeout, 22 truncated)" in failed.message
    assert "ended before the length the run pinned" in failed.message


def test_an_old_record_without_finish_reasons_still_reads() -> None:
    request = {
        "scheduled_ns": 0,
        "issued_ns": 0,
        "token_ns": [5, 6],
        "input_tokens": 3,
        "stopped_by": "max_new_tokens",
    }
    old = GenerationRecord.model_validate(
        {"max_new_tokens": 2, "ignore_eos": True, "duration_ns": 10, "requests": [request]}
    )
    assert old.requests[0].finish_reason is None
    assert old.load is None
    assert old.client_delay_ns == []
    assert summarize_generation(old).steady is None
