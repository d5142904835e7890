"""A served model's measurement session against llama.cpp's real server: the open loop keeps
its Poisson schedule whatever is in flight and measures its own lag; a server that stops
mid-run fails the remaining requests, counted by kind and never as latencies, and what was
measured before is kept, judged not VALID; more streams than the server serves at once bring
back answers cut short, failures of their own kind (``truncated``) that make the run INVALID;
a run asked no bounds at an easy rate is judged on nothing it did not ask."""

from __future__ import annotations

import itertools
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.llama_server import KEY, NOT_BUILT, SERVER_PYTHON, llama_server
from services.analyzer.summary import summarize
from services.workers.framework.endpoint import EndpointBackend
from services.workers.framework.sessions import GenerationSession
from services.workers.handover import EndpointOptions, JobInputs, Run
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.measurement.generation import judge_served, summarize_generation
from shared.measurement.progress import OnStep, Step, ignore_steps
from shared.measurement.requests import FAILURE_STREAK
from shared.messages import (
    EvaluationMeasured,
    LatencySummary,
    ReasonCode,
    RunEvaluation,
    Scenario,
    Severity,
)

pytestmark = [pytest.mark.server, pytest.mark.skipif(not SERVER_PYTHON.exists(), reason=NOT_BUILT)]


@pytest.fixture
def serving(llama_url: str) -> str:
    """The session's server (tests/conftest.py), for a test that only sends it requests."""
    return llama_url


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A server of the test's own, to stop."""
    with llama_server(tmp_path / "server.log") as (url, process):
        yield url, process


def measure_served(
    url: str, job: RunEvaluation, tokenizer: Path, tmp_path: Path, on_step: OnStep = ignore_steps
) -> Run:
    """``job`` measured as an endpoint worker's framework process measures it."""
    backend = EndpointBackend(EndpointOptions(url=url, api_key=KEY))
    inputs = JobInputs(model=None, results_dir=tmp_path / "results", tokenizer=tokenizer)
    return GenerationSession(backend, on_step).measure(job, inputs)


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
    smollm2_zoo: dict[str, ModelManifest], serving: str, tmp_path: Path
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    url = serving
    job = _job(manifest, name="server", target_qps=4.0, iterations=8, min_duration_s=0)
    run = measure_served(url, job, _tokenizer(manifest), tmp_path)
    record = run.generation
    assert record is not None
    assert record.served is not None
    # Every arrival was issued: llama-cpp-python's server cuts the request in flight short
    # when the next one arrives, and those come back as truncated failures, not samples.
    failures = record.served.failures
    assert set(failures) <= {"truncated"}
    assert len(record.requests) + sum(failures.values()) == 8
    lags = record.served.client_lag_ns
    # Every request issued at or after its scheduled arrival, never before.
    assert len(lags) == len(record.requests)
    assert all(lag >= 0 for lag in lags)
    assert all(r.issued_ns - r.scheduled_ns in lags for r in record.requests)
    # Requests overlap where arrivals come faster than the server answers: each is issued at
    # its own time, not when the previous one is done (and on this server the earlier one of
    # two that overlap is cut short).
    by_issue = sorted(record.requests, key=lambda r: r.issued_ns)
    assert failures.get("truncated", 0) > 0 or any(
        later.issued_ns < earlier.token_ns[-1] for earlier, later in itertools.pairwise(by_issue)
    )
    assert run.native is not None
    summary = summarize_generation(record, window=run.native.phases[0].window)
    assert summary.client_lag_p99_ms is not None
    assert summary.requests == len(record.requests)
    # What the client itself cost over the timed phase: 8 requests at 4 a second are nothing
    # to an event loop.
    client = summary.client
    assert client is not None
    assert client.cpu_per_request_ms > 0
    assert not client.saturated


def test_a_server_that_stops_mid_run_keeps_what_was_measured_and_counts_the_failures(
    smollm2_zoo: dict[str, ModelManifest],
    served: tuple[str, subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    url, process = served
    # Many requests asked for, back to back: the server is killed seconds into the timed
    # phase, with a request in flight and more to come. (One stream: llama-cpp-python's
    # server cuts a request short when another arrives, so two would truncate each other;
    # test_more_streams_than_the_server_serves_at_once_are_truncated_failures shows it.)
    job = _job(manifest, iterations=10_000, min_duration_s=0, max_duration_s=120)

    def on_step(step: Step) -> None:
        if step.part.startswith("timed queries"):
            threading.Timer(4.0, process.kill).start()

    run = measure_served(url, job, _tokenizer(manifest), tmp_path, on_step)
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


def _verdict(job: RunEvaluation, run: Run) -> LatencySummary:
    """The analyzer's result of what ``run`` measured, as a deployment would report it."""
    measured = EvaluationMeasured(
        evaluation_id=job.evaluation_id,
        agent_id="test",
        scenario=job.scenario,
        load_ns=run.load_ns,
        run=run.native,
        generation=run.generation,
    )
    return summarize(measured)


@pytest.mark.parametrize(
    "scenario",
    [
        {"concurrency": 2, "max_new_tokens": 16},
        {"concurrency": 4, "max_new_tokens": 32},
        {"name": "server", "target_qps": 4.0, "max_new_tokens": 32},
    ],
    ids=["2 streams", "4 streams", "4 requests per s"],
)
def test_more_streams_than_the_server_serves_at_once_are_truncated_failures(
    smollm2_zoo: dict[str, ModelManifest],
    served: tuple[str, subprocess.Popen[bytes]],
    tmp_path: Path,
    scenario: dict[str, object],
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    url, _ = served
    job = _job(manifest, iterations=16, min_duration_s=0, max_duration_s=60, **scenario)
    refused: str | None = None
    try:
        run = measure_served(url, job, _tokenizer(manifest), tmp_path)
    except PredictorError as error:
        refused = str(error)
    if refused is not None:
        # Every timed request cut short (the arrivals overlapped each time): the run is
        # refused as a whole, naming the truncation, never reported from no sample.
        assert "every timed request failed" in refused
        assert "tokens pinned" in refused
        return
    record = run.generation
    assert record is not None
    assert record.served is not None
    # llama-cpp-python's server ends the request in flight as the next arrives: [DONE] after
    # a token or two of the 16 or 32 pinned, no finish reason, no error.
    truncated = record.served.failures.get("truncated", 0)
    assert truncated >= 2
    (cause, *_) = (c for c in record.served.failure_causes if c.startswith("truncated"))
    assert "tokens pinned" in cause
    # Never a latency sample: every request kept ran to the length pinned, and said so.
    max_new_tokens = job.scenario.max_new_tokens
    assert all(r.output_tokens >= max_new_tokens - 1 for r in record.requests)
    assert {r.finish_reason for r in record.requests} <= {"length"}
    result = _verdict(job, run)
    assert result.verdict is not None
    assert result.verdict.status == "INVALID"
    (failed,) = (r for r in result.verdict.errors if r.code is ReasonCode.REQUESTS_FAILED)
    assert f"{truncated} truncated" in failed.message
    assert result.generation is not None
    assert result.generation.failures["truncated"] == truncated
    assert result.generation.requests == len(record.requests)


def test_a_server_run_asked_no_bounds_is_judged_on_nothing_it_did_not_ask(
    smollm2_zoo: dict[str, ModelManifest],
    served: tuple[str, subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    manifest = smollm2_zoo["onnxruntime"]
    url, _ = served
    # An arrival every five seconds on average: one request at a time, each far beyond the
    # image models' 10 ms latency bound, eight of them far too few for a p99.
    job = _job(manifest, name="server", target_qps=0.2, iterations=8, min_duration_s=0, seed=3)
    run = measure_served(url, job, _tokenizer(manifest), tmp_path)
    result = _verdict(job, run)
    assert result.verdict is not None
    assert result.p99_ms > job.scenario.latency_bound_ms
    codes = result.verdict.codes
    assert ReasonCode.LATENCY_BOUND_MISSED not in codes
    assert ReasonCode.HEADLINE_IS_BOUND not in codes
    # What remains is what this machine did meanwhile (another process's CPU, say) and
    # what the run said of itself, never a bound it was not given.
    allowed = {
        ReasonCode.OTHER_PROCESSES_USED_CPU,
        ReasonCode.CPU_STEAL,
        ReasonCode.NOISE_PROBE_SHIFTED,
        ReasonCode.REQUESTS_FAILED,
        ReasonCode.TOO_FEW_QUERIES,
    }
    assert {r.code for r in result.verdict.errors} <= allowed
    if not (codes & allowed):
        assert result.verdict.status == "VALID"
