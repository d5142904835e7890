"""vLLM, a server no one here wrote, as a user runs it beside dlscope: ``dlscope run smollm2
--framework onnxruntime,endpoint --endpoint URL`` with both exporting their traces to one
collector measures the in-process export and vLLM serving the same weights in float32, in one
experiment with the parity gate; every request vLLM served is a span in the evaluation's
trace, under the worker's span for the job; and the server's own counters, read before and
after, saw the timed requests."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from dlscope.cli.outcome import COMPLETED
from harness.llama_server import KEY
from harness.otlp import OtlpReceiver
from harness.vllm_server import NOT_INSTALLED, VLLM
from harness.waiting import eventually
from shared.eventstore import EventStore
from shared.messages import evaluation_stream
from tests.e2e.test_cli import dlscope

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.server,
    pytest.mark.skipif(not VLLM.exists(), reason=NOT_INSTALLED),
]

REQUESTS = 3
NEW_TOKENS = 6


@pytest.fixture
def served(vllm_served: tuple[str, OtlpReceiver]) -> tuple[str, OtlpReceiver]:
    """vLLM's API root, and the collector it and dlscope export their spans to: the
    session's (tests/conftest.py), which the vLLM benchmark's smoke run shares."""
    return vllm_served


def test_vllm_joins_the_evaluations_trace_and_agrees_with_the_in_process_model(
    smollm2_home: Path, served: tuple[str, OtlpReceiver], tmp_path: Path
) -> None:
    url, receiver = served
    result_file = tmp_path / "experiment.json"
    result = dlscope(
        smollm2_home,
        *("run", "smollm2", "--framework", "onnxruntime,endpoint", "--endpoint", url),
        *("-n", str(REQUESTS), "--min-duration", "0", "--max-new-tokens", str(NEW_TOKENS)),
        *("--json", str(result_file)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
        DLSCOPE_OTLP_ENDPOINT=receiver.url,
    )
    document = json.loads(result_file.read_text())
    by_framework = {e["framework"]: e for e in document["evaluations"]}
    served_run = by_framework["endpoint"]
    assert served_run["status"] == "completed", served_run["error"]
    generation = served_run["result"]["generation"]
    assert generation["requests"] == REQUESTS
    assert generation["timed"] == "chunk"
    assert generation["failures"] == {}

    # The gate compares vLLM's greedy tokens with ONNX Runtime's on the same float32 weights;
    # `dlscope run` exits 1 where they part, as for any parity failure.
    (pair,) = document["experiment"]["comparison"]["parity"]
    if pair["within_tolerance"]:
        assert result.returncode in COMPLETED, result.stderr
    else:
        assert result.returncode == 1, result.stderr

    # vLLM's spans for the requests it served are in the evaluation's trace, each the child
    # of a span dlscope exported (the worker's span for the job).
    trace_id = document["trace_id"]

    async def requests_traced() -> bool:
        ours = [s for s in receiver.spans if s.service == "vllm" and s.trace_id == trace_id]
        return len([s for s in ours if s.name == "llm_request"]) >= REQUESTS

    asyncio.run(eventually(requests_traced, timeout=30))
    spans = [s for s in receiver.spans if s.trace_id == trace_id]
    dlscope_spans = {s.span_id for s in spans if s.service != "vllm"}
    served_spans = [s for s in spans if s.service == "vllm" and s.name == "llm_request"]
    assert dlscope_spans, "dlscope exported the evaluation's own spans to the same collector"
    assert all(s.parent_span_id in dlscope_spans for s in served_spans), served_spans

    # The server's own counters, read before and after the timed requests, saw them finish
    # at the pinned length and count at least their tokens.
    served_record = asyncio.run(_served_record(smollm2_home, served_run["evaluation_id"]))
    before, after = served_record["metrics_before"], served_record["metrics_after"]
    finished = _counter(after, "vllm:request_success_total", 'finished_reason="length"')
    assert finished - _counter(
        before, "vllm:request_success_total", 'finished_reason="length"'
    ) >= (REQUESTS)
    generated = _counter(after, "vllm:generation_tokens_total") - _counter(
        before, "vllm:generation_tokens_total"
    )
    assert generated >= REQUESTS * NEW_TOKENS


async def _served_record(home: Path, evaluation_id: str) -> dict[str, object]:
    """The measured event's record of the server (its metrics before and after)."""
    async with EventStore.from_url(f"sqlite+aiosqlite:///{home / 'dlscope.db'}") as store:
        events = await store.stream_events(evaluation_stream(uuid.UUID(evaluation_id)))
    (measured,) = [e for e in events if e.type == "evaluation.measured"]
    record: dict[str, object] = measured.payload["generation"]["served"]
    return record


def _counter(metrics: object, name: str, label: str = "") -> float:
    """The sum of the series of ``name`` (with ``label``) in a ``/metrics`` reading."""
    assert isinstance(metrics, dict), f"no /metrics reading: {metrics!r}"
    return sum(
        value
        for series, value in metrics.items()
        if series.partition("{")[0] == name and label in series
    )
