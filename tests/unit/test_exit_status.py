"""What a result makes of the command line's exit status, and what `compare` and `sweep` do
with a result that is not to be trusted: `run`, `submit` and `sweep` exit non-zero on an
INVALID run (3; 4 with failed requests past the bound), `compare` refuses an INVALID input,
and a sweep measures a disturbed load once more and says so."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from dlscope.cli.app import app
from dlscope.cli.client import Evaluated
from dlscope.cli.evaluate import _show
from dlscope.cli.outcome import EXIT_FAILURES, EXIT_INVALID, EXIT_OK, exit_status, worst
from services.analyzer.summary import summarize
from shared.messages import Scenario
from tests.unit.test_result_summary import served_generation

MS = 1_000_000
SERVER = Scenario(name="server", target_qps=4.0, iterations=64, max_new_tokens=16)


def _result(*, failed: dict[str, int] | None = None) -> dict[str, Any]:
    """A served language model's result, as the analyzer reports it (JSON)."""
    return summarize(served_generation(SERVER, failures=failed)).model_dump(mode="json")


def _evaluated(result: dict[str, Any]) -> Evaluated:
    evaluation = {
        "status": "completed",
        "model": "smollm2",
        "model_version": "1.1.0",
        "framework": "endpoint",
        "hardware": "cpu",
        "result": result,
    }
    return Evaluated(uuid.uuid4(), evaluation, {"evaluation": evaluation})


def test_a_valid_run_exits_zero_and_an_invalid_one_three_or_four() -> None:
    valid = _result()
    assert valid["verdict"]["status"] == "VALID", valid["verdict"]
    assert exit_status(valid) == EXIT_OK
    _show(_evaluated(valid), None)  # no exit: a VALID run is a success
    truncated = _result(failed={"truncated": 40})
    assert exit_status(truncated) == EXIT_FAILURES
    with pytest.raises(typer.Exit) as exited:
        _show(_evaluated(truncated), None)
    assert exited.value.exit_code == EXIT_FAILURES
    late = _result()
    late["verdict"] = {
        "status": "INVALID",
        "reasons": [{"code": "other_processes_used_cpu", "severity": "error", "message": "x"}],
    }
    assert exit_status(late) == EXIT_INVALID
    assert exit_status({"verdict": None, "loadgen": [{"result": "INVALID"}]}) == EXIT_INVALID
    assert exit_status({"verdict": None, "loadgen": [{"result": "VALID"}]}) == EXIT_OK
    assert worst([EXIT_OK, EXIT_INVALID, EXIT_FAILURES]) == EXIT_FAILURES
    assert worst([EXIT_OK, 1, EXIT_INVALID]) == 1


@pytest.mark.parametrize("command", ["run", "submit", "sweep"])
def test_the_help_documents_the_exit_statuses(command: str) -> None:
    shown = " ".join(CliRunner().invoke(app, [command, "--help"]).stdout.split())
    assert "Exit status: 0" in shown
    assert "3 " in shown
    assert "INVALID" in shown


def _document(path: Path, status: str, latencies_ms: list[float]) -> Path:
    codes = [] if status == "VALID" else ["other_processes_used_cpu"]
    document = {
        "evaluation": {
            "result": {
                "statistics": [{"headline": {"percentile": 0.9}}],
                "verdict": {
                    "status": status,
                    "reasons": [{"code": c, "severity": "error", "message": c} for c in codes],
                },
            }
        },
        "events": [
            {
                "type": "evaluation.measured",
                "payload": {
                    "run": {"phases": [{"latencies_ns": [int(x * MS) for x in latencies_ms]}]}
                },
            }
        ],
    }
    path.write_text(json.dumps(document))
    return path


def test_compare_refuses_a_difference_against_an_invalid_result(tmp_path: Path) -> None:
    fast = [1.0 + 0.001 * (i % 7) for i in range(200)]
    slow = [2.0 + 0.001 * (i % 7) for i in range(200)]
    good = _document(tmp_path / "good.json", "VALID", fast)
    busy = _document(tmp_path / "busy.json", "INVALID", slow)
    runner = CliRunner()
    valid = runner.invoke(
        app, ["compare", str(good), str(_document(tmp_path / "b.json", "VALID", slow))]
    )
    assert valid.exit_code == 0, valid.output
    assert "significant" in valid.stdout
    refused = runner.invoke(app, ["compare", str(busy), str(good)])
    assert refused.exit_code == EXIT_INVALID
    said = " ".join(refused.output.split())
    assert "the baseline" in said
    assert "is INVALID (other_processes_used_cpu)" in said
    assert "significant" not in refused.stdout
    anyway = runner.invoke(app, ["compare", str(busy), str(good), "--allow-invalid"])
    assert anyway.exit_code == 0, anyway.output
    flagged = " ".join(anyway.stdout.split())
    assert flagged.startswith("median")
    assert "NOT EVIDENCE: significant" in flagged
    assert "is INVALID (other_processes_used_cpu)" in flagged


class _Deployment:
    """A deployment whose first run of each load is disturbed when asked (``disturbed``)."""

    def __init__(self, disturbed: dict[int, int]) -> None:
        self.disturbed = disturbed  # streams -> how many of its runs are disturbed
        self.asked: list[int] = []

    def evaluate(self, request: Any, *, wait: bool) -> Evaluated:
        streams = request.scenario.concurrency
        self.asked.append(streams)
        result = _result()
        if self.asked.count(streams) <= self.disturbed.get(streams, 0):
            result["verdict"] = {
                "status": "INVALID",
                "reasons": [
                    {
                        "code": "other_processes_used_cpu",
                        "severity": "error",
                        "message": "other processes used 1.40 of 2 cores",
                    }
                ],
            }
        return _evaluated(result)


def _sweep(deployment: _Deployment, tmp_path: Path) -> Any:
    wide = Console(width=400)  # the table whole, as a wide terminal shows it
    with (
        patch("dlscope.cli.sweep.client_for", return_value=deployment),
        patch("dlscope.cli.sweep.console", wide),
    ):
        return CliRunner().invoke(
            app,
            ["sweep", "smollm2", "--levels", "1,2", "--json", str(tmp_path / "s.json")],
            catch_exceptions=False,
        )


def test_a_sweep_measures_a_disturbed_load_once_more_and_says_so(tmp_path: Path) -> None:
    deployment = _Deployment({2: 1})
    swept = _sweep(deployment, tmp_path)
    assert deployment.asked == [1, 2, 2]
    assert swept.exit_code == EXIT_OK, swept.output
    shown = " ".join(swept.stdout.split())
    assert "2 concurrent stream(s) was disturbed: measuring it once more" in shown
    assert "re-measured (first: other_processes_used_cpu)" in shown
    written = json.loads((tmp_path / "s.json").read_text())
    assert "other processes used 1.40 of 2 cores" in written["remeasured"]["2"]


def test_a_load_disturbed_twice_is_said_and_the_sweep_exits_non_zero(tmp_path: Path) -> None:
    deployment = _Deployment({2: 2})
    swept = _sweep(deployment, tmp_path)
    assert deployment.asked == [1, 2, 2]
    assert swept.exit_code == EXIT_INVALID
    shown = " ".join(swept.stdout.split())
    assert "twice: other_processes_used_cpu" in shown
    assert "2 concurrent stream(s): disturbed twice, its figures are not the load's" in shown
