"""A served model's measurement session against llama.cpp's real server: the open loop keeps
its Poisson schedule whatever is in flight and measures its own lag; a server that stops
mid-run fails the remaining requests, counted by kind and never as latencies, and what was
measured before is kept, judged not VALID."""

from __future__ import annotations

import itertools
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.llama_server import KEY, NOT_BUILT, SERVER_PYTHON, llama_server
from services.workers.framework.served import measure_served
from services.workers.framework.streams import FAILURE_STREAK
from shared.manifests import ModelManifest
from shared.measurement.generation import judge_served, summarize_generation
from shared.measurement.progress import Step
from shared.messages import ReasonCode, RunEvaluation, Scenario, Severity

pytestmark = [pytest.mark.server, pytest.mark.skipif(not SERVER_PYTHON.exists(), reason=NOT_BUILT)]


@pytest.fixture
def serving(llama_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's server (tests/conftest.py), for a test that only sends it requests."""
    monkeypatch.setenv("DLSCOPE_ENDPOINT_URL", llama_url)
    monkeypatch.setenv("DLSCOPE_ENDPOINT_API_KEY", KEY)
    return llama_url


@pytest.fixture
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A server of the test's own, to stop."""
    with llama_server(tmp_path / "server.log") as (url, process):
        monkeypatch.setenv("DLSCOPE_ENDPOINT_URL", url)
        monkeypatch.setenv("DLSCOPE_ENDPOINT_API_KEY", KEY)
        yield url, process


def _job(manifest: ModelManifest, **scenario: object) -> RunEvaluation:
    return RunEvaluation(
        evaluation_id=uuid.uuid4(),
        manifest=manifest,
        framework="endpoint",
        framework_version="*",
        hardware="cpu",
        scenario=Scenario.model_validate({"warmup": 1, "max_new_tokens": 4, **scenario}),
    )


def _tokenizer(manifest: ModelManifest) -> Path:
    assert manifest.tokenizer is not None
    return Path(manifest.tokenizer.uri)


def test_the_open_loop_issues_on_schedule_and_measures_its_own_lag(
    smollm2_zoo: dict[str, ModelManifest], serving: str
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    job = _job(manifest, name="server", target_qps=4.0, iterations=8, min_duration_s=0)
    run = measure_served(job, tokenizer_path=_tokenizer(manifest))
    record = run.generation
    assert record is not None
    assert record.served is not None
    assert len(record.requests) == 8
    lags = record.served.client_lag_ns
    # Every request issued at or after its scheduled arrival, never before.
    assert len(lags) == 8
    assert all(lag >= 0 for lag in lags)
    assert all(r.issued_ns - r.scheduled_ns in lags for r in record.requests)
    # Requests overlap where arrivals come faster than the server answers: each is issued at
    # its own time, not when the previous one is done.
    by_issue = sorted(record.requests, key=lambda r: r.issued_ns)
    assert any(
        later.issued_ns < earlier.token_ns[-1] for earlier, later in itertools.pairwise(by_issue)
    )
    summary = summarize_generation(record)
    assert summary.client_lag_p99_ms is not None
    assert summary.requests == 8


def test_a_server_that_stops_mid_run_keeps_what_was_measured_and_counts_the_failures(
    smollm2_zoo: dict[str, ModelManifest], served: tuple[str, subprocess.Popen[bytes]]
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    _, process = served
    # Many requests asked for, two streams: the server is killed a second into the timed
    # phase, with requests in flight and more to come.
    job = _job(manifest, iterations=10_000, min_duration_s=0, max_duration_s=120, concurrency=2)

    def on_step(step: Step) -> None:
        if step.part.startswith("timed queries"):
            threading.Timer(1.0, process.kill).start()

    run = measure_served(job, tokenizer_path=_tokenizer(manifest), on_step=on_step)
    record = run.generation
    assert record is not None
    assert record.served is not None
    assert record.requests, "what was measured before the server stopped is kept"
    failures = record.served.failures
    assert sum(failures.values()) >= FAILURE_STREAK
    assert set(failures) <= {"refused", "disconnected"}
    assert record.served.failure_causes
    # A failed request is not a latency sample: every timed latency is a complete request.
    assert run.native is not None
    assert len(run.native.phases[0].latencies_ns) == len(record.requests)
    reasons = judge_served(summarize_generation(record))
    (failed,) = (r for r in reasons if r.code is ReasonCode.REQUESTS_FAILED)
    assert failed.severity is Severity.ERROR
