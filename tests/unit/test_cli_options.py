"""``run``, ``submit`` and ``publish`` take one set of evaluation options, checked the same way
before anything starts: a bad option is refused naming what the user typed, whether the
request would go to the embedded dlscope, a gateway or a broker."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import typer
from typer.testing import CliRunner

from dlscope.cli import app
from dlscope.cli.options import ComparisonOptions, EvaluationOptions
from services.scheduler.experiments import member_evaluations
from shared.messages import ExperimentMember, ExperimentScheduled

# Nothing listens here: a command that got past its options would fail to connect instead.
UNREACHABLE = ["--gateway", "http://127.0.0.1:9"]
COMMANDS = {
    "run": [],
    "submit": UNREACHABLE,
    "publish": [],
}


def _options(command: str) -> set[str]:
    found = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {param.name for param in found.params if param.name}


def test_the_three_commands_take_every_evaluation_option() -> None:
    evaluation = {field.name for field in dataclasses.fields(EvaluationOptions)}
    comparison = {field.name for field in dataclasses.fields(ComparisonOptions)}
    assert len(evaluation) == 33  # --replay joined the workload
    for command in COMMANDS:
        assert evaluation <= _options(command), command
    # Only the commands that can start an experiment compare its members.
    assert comparison <= _options("run")
    assert comparison <= _options("submit")
    assert not comparison & _options("publish")


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["-b", "0"], "--batch-size (-b) must be at least 1, got 0"),
        (["--batch-sizes", "1,x"], "--batch-sizes takes integers separated by commas"),
        (["--scenario", "nonsense"], "--scenario must be one of"),
        (["-f", "caffe"], "unknown framework 'caffe'"),
        (["--trace-level", "kernels"], "--trace-level must be one of"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
        (["--output-tokens", "lots"], "--output-tokens 'lots' is not a length distribution"),
        (["--input-tokens", "uniform:9-3"], "--input-tokens 'uniform:9-3': uniform lengths: min"),
        (
            ["--output-tokens", "40000"],
            "--output-tokens: at most 32768 tokens a request, and 40000 asks",
        ),
    ],
)
def test_a_bad_option_is_refused_the_same_way_by_each_command(
    command: str, given: list[str], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # publish refuses an in-memory broker before it sends: give it one it cannot reach.
    monkeypatch.setenv("DLSCOPE_BROKER_URL", "amqp://guest:guest@127.0.0.1:9/")
    result = CliRunner().invoke(app, [command, "squeezenet", *COMMANDS[command], *given])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())


def test_an_experiment_traces_each_member_at_the_level_asked_for() -> None:
    options = EvaluationOptions(framework="onnxruntime,pytorch", trace_level="framework")
    request = options.experiment(
        "digits-cnn", ["onnxruntime", "pytorch"], ComparisonOptions(), requested_by="test"
    )
    assert (request.trace_level, request.trace_queries) == ("framework", 5)
    plan = ExperimentScheduled(
        experiment_id=request.experiment_id,
        members=[
            ExperimentMember(
                evaluation_id=uuid.uuid4(),
                model="digits-cnn",
                model_version="1.0.0",
                framework=framework,
                framework_version="1",
                agent_id=f"host-{framework}-cpu",
                host="host",
            )
            for framework in ("onnxruntime", "pytorch")
        ],
        tolerance=request.tolerance,
        deadline_s=60,
    )
    members = member_evaluations(request, plan)
    assert [(m.framework, m.trace_level, m.trace_queries) for m in members] == [
        ("onnxruntime", "framework", 5),
        ("pytorch", "framework", 5),
    ]
    # Measured one at a time, each holding the device, unless asked to run together.
    assert not any(m.concurrent for m in members)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--over", "speed"], "--over takes streams, rate or batch, not 'speed'"),
        (["--over", "batch", "--levels", "1,2.5"], "--levels takes positive integers (batch"),
        (["--over", "batch", "--scenario", "server"], "--over batch runs the offline scenario"),
        (
            ["--over", "batch", "--search", "--ttft-bound", "100"],
            "an offline batch's TTFT counts from the phase's start",
        ),
        (["--over", "rate", "--concurrency", "2"], "--over rate runs the server scenario"),
        (["--over", "rate", "--scenario", "offline"], "leave out --concurrency and --scenario"),
        (["--over", "rate", "--levels", "1,fast"], "--levels takes positive rates (req/s)"),
        (["--levels", "1.5"], "--levels takes positive integers (streams)"),
        (["--over", "rate", "--levels", "1,inf"], "--levels takes positive rates (req/s)"),
        (["--over", "rate", "--levels", "nan"], "--levels takes positive rates (req/s)"),
        (["--levels", ",".join(["1"] * 20_000)], "--levels takes at most 64 levels, not 20000"),
        (["--search", "--over", "rate"], "--search needs a bound to meet"),
    ],
)
def test_a_sweep_refuses_a_bad_load_before_the_first_runs(given: list[str], said: str) -> None:
    result = CliRunner().invoke(app, ["sweep", "smollm2", *given, *UNREACHABLE])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())
