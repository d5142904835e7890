"""How a served model's run is summed up and judged: chunk times with token counts from the
tokenizer (TPOT derived from them), failures counted apart and past 1 % not VALID, a late
client not VALID, token counts that disagree with the server's a warning; and what of the
endpoint events may show."""

from __future__ import annotations

import pytest

from services.workers.framework.endpoint import MAX_METRICS, prometheus_values
from services.workers.framework.endpoint import public_url as _public
from shared.manifests import ModelManifest
from shared.measurement.generation import (
    MAX_FAILED_FRACTION,
    judge_served,
    summarize_generation,
)
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    ReasonCode,
    ServedRun,
    Severity,
    experiment_models,
)

MS = 1_000_000


def _record(
    requests: int = 100,
    *,
    failures: dict[str, int] | None = None,
    lag_ms: float = 0.0,
    reported: int | None = None,
) -> GenerationRecord:
    # Each request: 4 chunks 10 ms apart after a 50 ms first chunk, 8 tokens by the tokenizer.
    made = [
        GeneratedRequest(
            scheduled_ns=i * 100 * MS,
            issued_ns=i * 100 * MS + int(lag_ms * MS),
            token_ns=[i * 100 * MS + (50 + 10 * k) * MS for k in range(4)],
            input_tokens=20,
            stopped_by="max_new_tokens",
            counted_tokens=8,
            reported_tokens=reported,
        )
        for i in range(requests)
    ]
    return GenerationRecord(
        max_new_tokens=8,
        ignore_eos=True,
        duration_ns=requests * 100 * MS,
        requests=made,
        timed="chunk",
        served=ServedRun(
            url="http://127.0.0.1:8000/v1",
            model="smollm2",
            api="completions",
            failures=failures or {},
            client_lag_ns=[int(lag_ms * MS)] * requests,
        ),
    )


def test_per_token_figures_divide_by_the_tokenizer_count_not_the_chunks() -> None:
    summary = summarize_generation(_record())
    assert summary.timed == "chunk"
    assert summary.output_tokens_mean == 8
    # (E2E - TTFT) / (tokens - 1) = 30 ms / 7, though the gaps between chunks are 10 ms.
    assert summary.tpot is not None
    assert summary.tpot.percentile(0.5).value_ns == pytest.approx(30 * MS / 7, abs=1)
    assert summary.itl is not None
    assert summary.itl.percentile(0.5).value_ns == 10 * MS
    assert "inter-chunk" in summary.definitions["itl"]
    assert judge_served(summary) == []


def test_failed_requests_are_a_warning_then_past_one_percent_an_error() -> None:
    (few,) = judge_served(summarize_generation(_record(failures={"timeout": 1})))
    assert few.code is ReasonCode.REQUESTS_FAILED
    assert few.severity is Severity.WARNING
    assert "1 of 101 timed requests failed (1 timeout)" in few.message
    many = judge_served(summarize_generation(_record(failures={"refused": 3, "http_error": 2})))
    (failed,) = many
    assert failed.severity is Severity.ERROR
    assert failed.measured == pytest.approx(5 / 105)
    assert failed.limit == MAX_FAILED_FRACTION


def test_a_client_that_issued_late_makes_the_run_not_valid() -> None:
    assert judge_served(summarize_generation(_record(lag_ms=0.5))) == []
    (late,) = judge_served(summarize_generation(_record(lag_ms=8)))
    assert late.code is ReasonCode.LOAD_GENERATOR_LATE
    assert late.severity is Severity.ERROR
    assert late.measured == pytest.approx(8)


def test_token_counts_far_from_the_servers_are_a_warning() -> None:
    assert judge_served(summarize_generation(_record(reported=8))) == []
    summary = summarize_generation(_record(reported=10))
    assert summary.token_count_difference == pytest.approx(-0.2)
    (warning,) = judge_served(summary)
    assert warning.code is ReasonCode.TOKEN_COUNTS_DISAGREE
    assert warning.severity is Severity.WARNING


def test_the_servers_metrics_are_read_as_prometheus_samples_bounded() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests running",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{model_name="smollm2"} 3.0',
            "vllm:gpu_cache_usage_perc 0.25 1700000000",
            "not a sample",
            # A quantile with no observations yet: no consumer reads NaN or Infinity.
            'vllm:e2e_request_latency_seconds{quantile="0.5"} NaN',
            "vllm:queue_time_seconds_max +Inf",
            "odd\x00name 1.0",
        ]
    )
    assert prometheus_values(text) == {
        'vllm:num_requests_running{model_name="smollm2"}': 3.0,
        "vllm:gpu_cache_usage_perc": 0.25,
        "odd\ufffdname": 1.0,  # a server's text is kept, cleaned of what no store keeps
    }
    many = "\n".join(f"series_{i} {i}" for i in range(MAX_METRICS + 50))
    assert len(prometheus_values(many)) == MAX_METRICS


def test_a_url_shown_in_events_has_no_credentials() -> None:
    assert _public("http://user:secret@10.0.0.5:8000/v1") == "http://10.0.0.5:8000/v1"
    assert _public("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_a_served_model_is_its_own_export_for_the_endpoint(
    smollm2_zoo: dict[str, ModelManifest],
) -> None:
    smollm2 = smollm2_zoo["onnxruntime"]
    assert "endpoint" in smollm2.frameworks
    chosen = experiment_models(smollm2, smollm2_zoo.values(), ["onnxruntime", "endpoint"])
    assert [m.ref for m in chosen] == [smollm2.ref], "the one model, listed once"
