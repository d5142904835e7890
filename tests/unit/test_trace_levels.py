"""Trace levels are chosen per evaluation: on the wire (AMQP message, job), on the command
line; ``model`` unless asked; an unknown level is refused naming the allowed ones."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from dlscope.cli import app
from shared.errors import InvalidMessage
from shared.messages import (
    TRACE_LEVELS,
    Envelope,
    EvaluationRequested,
    ExperimentRequested,
    RunEvaluation,
    evaluation_stream,
)
from shared.messages.tracing import includes, profiled_levels


def _requested(**fields: object) -> Envelope:
    evaluation_id = uuid.uuid4()
    return Envelope(
        type=EvaluationRequested.TYPE,
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
        payload={
            "evaluation_id": str(evaluation_id),
            "model": "squeezenet",
            "framework": "onnxruntime",
            **fields,
        },
    )


def test_an_evaluation_is_traced_at_model_level_unless_it_asks() -> None:
    request = _requested().open(EvaluationRequested)
    assert request.trace_level == "model"
    assert request.trace_queries == 5
    assert _requested(trace_level="full").open(EvaluationRequested).trace_level == "full"


def test_an_unknown_level_on_the_wire_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(InvalidMessage) as refused:
        _requested(trace_level="kernels").open(EvaluationRequested)
    assert "trace_level" in str(refused.value)
    for level in TRACE_LEVELS:
        assert repr(level) in str(refused.value)


def test_the_job_carries_the_level_the_request_asked_for() -> None:
    assert RunEvaluation.model_fields["trace_level"].default == "model"
    assert "trace_queries" in RunEvaluation.model_fields


def test_levels_include_the_shallower_ones_and_deeper_ones_run_their_own_passes() -> None:
    assert includes("framework", "model")
    assert not includes("model", "framework")
    assert profiled_levels("model") == ()
    assert profiled_levels("framework") == ("framework",)
    assert profiled_levels("hardware") == ("framework", "library", "hardware")
    assert profiled_levels("full") == ("framework", "library", "hardware")
    assert profiled_levels("none") == ()


def test_the_cli_refuses_an_unknown_level_before_running_anything() -> None:
    result = CliRunner().invoke(app, ["run", "squeezenet", "--trace-level", "kernels"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--trace-level must be one of none, application, model, framework" in said
    assert "'kernels'" in said


def test_an_experiment_traces_its_members_at_the_level_it_asks_for() -> None:
    asked = {"experiment_id": str(uuid.uuid4()), "models": [{"model": "digits-cnn"}]}
    assert ExperimentRequested.model_validate(asked).trace_level == "model"
    deep = ExperimentRequested.model_validate({**asked, "trace_level": "framework"})
    assert (deep.trace_level, deep.trace_queries) == ("framework", 5)
    with pytest.raises(ValidationError, match="trace_level"):
        ExperimentRequested.model_validate({**asked, "trace_level": "kernels"})
