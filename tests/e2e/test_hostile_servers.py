"""A served model's server that misbehaves, as a user meets one: ``dlscope run --served-model
stub --endpoint URL`` against the stub (``harness.openai_stub``) answering the requests
before the timed phase (the parity check, the cold request) and the first timed one as it
should, then every other one as a hostile or faulty server would. Each run ends within its
limits, the requests failed by kind and counted as data, its measurement recorded, and the
framework process under 1 GB: a server streaming forever, a byte a second, one 50 MB chunk
or a million tiny ones costs a bounded amount of time and memory; NUL in what the server
says is kept, cleaned, never an unpublishable measurement. One that misbehaves from its
first request fails the run at once, naming how."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlscope.cli.outcome import COMPLETED, EXIT_FAILURES
from harness.openai_stub import MODEL, StubTiming, openai_stub
from harness.stub_tokenizer import write_stub_tokenizer
from tests.e2e.test_cli import dlscope

pytestmark = pytest.mark.e2e

TOKENS = 16
# A run's requests may take the longest phase (1 s) and one chunk timeout (2 s: longer than
# a trickle's second between bytes) beyond.
RUN = ("-n", "4", "--warmup", "0", "--min-duration", "0", "--max-duration", "1")
TIMEOUT = {"DLSCOPE_ENDPOINT_TIMEOUT_S": "2"}
GIGABYTE = 1024**3


def run_against(
    misbehave: str, tmp_path: Path, *, honest: int = 3
) -> tuple[int, dict[str, Any], str]:
    """The run's exit status, its evaluation as ``--json`` writes it, and what it printed."""
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    timing = StubTiming(misbehave=misbehave, honest=honest, every=2)
    with openai_stub(timing) as (url, _):
        result = dlscope(
            tmp_path,
            *("run", "--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", url),
            *RUN,
            *("--max-new-tokens", str(TOKENS), "--json", str(tmp_path / "run.json")),
            **TIMEOUT,
        )
    return result.returncode, json.loads((tmp_path / "run.json").read_text()), printed(result)


def printed(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stdout + result.stderr).split())


@pytest.mark.parametrize(
    ("misbehave", "kind", "cause"),
    [
        ("forever", "oversized", "chunks with content, more than the 16 tokens asked"),
        ("keep-alive", "oversized", "bytes, more than the 16 tokens asked could make"),
        ("tiny-chunks", "oversized", "chunks with content, more than the 16 tokens asked"),
        ("huge-chunk", "oversized", "bytes, more than the 16 tokens asked could make"),
        ("trickle", "overlong", "still answering after 3 s, the most a request may take"),
    ],
)
def test_an_answer_past_its_bounds_is_a_failure_of_its_kind_and_costs_little(
    misbehave: str, kind: str, cause: str, tmp_path: Path
) -> None:
    status, document, shown = run_against(misbehave, tmp_path)
    assert status == EXIT_FAILURES, shown  # failed requests: the verdict says so
    evaluation = document["evaluation"]
    assert evaluation["status"] == "completed", evaluation["error"]
    result = evaluation["result"]
    generation = result["generation"]
    assert set(generation["failures"]) == {kind}
    assert generation["failures"][kind] >= 1
    served = document["events"][3]["payload"]["generation"]["served"]
    assert any(cause in line for line in served["failure_causes"]), served["failure_causes"]
    assert result["machine"]["cost"]["peak_memory"]["bytes"] < GIGABYTE
    assert kind in shown  # the user is told how they failed


def test_nul_in_a_servers_error_is_kept_cleaned_and_the_measurement_recorded(
    tmp_path: Path,
) -> None:
    status, document, shown = run_against("nul-error", tmp_path)
    assert status == EXIT_FAILURES, shown
    evaluation = document["evaluation"]
    assert evaluation["status"] == "completed", evaluation["error"]
    assert set(evaluation["result"]["generation"]["failures"]) == {"http_error"}
    served = document["events"][3]["payload"]["generation"]["served"]
    assert "HTTP 500: internal\ufffderror" in served["failure_causes"][0]


def test_nul_in_a_servers_model_list_leaves_the_run_and_its_records_readable(
    tmp_path: Path,
) -> None:
    status, document, shown = run_against("nul-models", tmp_path)
    assert status in COMPLETED, shown
    evaluation = document["evaluation"]
    assert evaluation["status"] == "completed", evaluation["error"]
    assert evaluation["result"]["generation"]["failures"] == {}, shown


def test_a_server_misbehaving_from_its_first_request_fails_the_run_at_once_naming_how(
    tmp_path: Path,
) -> None:
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    with openai_stub(StubTiming(misbehave="trickle")) as (url, _):
        result = dlscope(
            tmp_path,
            *("run", "--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", url),
            *RUN,
            *("--max-new-tokens", str(TOKENS)),
            **TIMEOUT,
        )
    assert result.returncode not in COMPLETED
    assert "failed (overlong): still answering after 3 s" in printed(result)
