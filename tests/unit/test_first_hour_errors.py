"""A newcomer's mistakes, each said in one line that names the problem and the fix (issue 44):
a dataset of another shape, a version that is none, a misspelt model, the zoo's models not
built yet; and the framework's own logs kept out of a plain run's output."""

from __future__ import annotations

import collections
import io
import logging
import os
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlscope.cli import app, terminal
from dlscope.cli.evaluate import _following
from dlscope.cli.serving import frameworks_to_serve
from dlscope.cli.zoo_build import ZOO_KINDS, ZOO_MODELS, unknown_model
from dlscope.zoo.savedmodel import _banner_kept_back
from harness.payloads import model_manifest
from services.registry import Catalog
from services.workers.framework.sessions.inputs import query_inputs
from services.workers.framework.sessions.measuring import one_line
from services.workers.isolation import _read_output
from shared.config import REPOSITORY_ROOT, Settings
from shared.datasets import load_dataset
from shared.errors import ModelNotFound, PredictorError
from shared.manifests import DatasetManifest, ModelManifest, load_manifest, matches
from shared.messaging.amqp.link import _unreachable, _vhost_refused

MANIFESTS = REPOSITORY_ROOT / "manifests"


def _manifest(path: Path) -> ModelManifest:
    manifest = load_manifest(path)
    assert isinstance(manifest, ModelManifest)
    return manifest


def _dataset(name: str) -> DatasetManifest:
    manifest = load_manifest(MANIFESTS / "datasets" / f"{name}.yaml")
    assert isinstance(manifest, DatasetManifest)
    return manifest


def _said(output: str) -> str:
    return " ".join(output.split())


# A dataset of another shape


def test_a_dataset_of_another_shape_is_refused_naming_both_shapes_and_what_to_do() -> None:
    squeezenet = _manifest(MANIFESTS / "models" / "squeezenet.yaml")
    digits = load_dataset(_dataset("digits"))
    with pytest.raises(PredictorError) as refused:
        query_inputs(squeezenet, digits, 1, seed=0)
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith("dataset digits@1.0.0 does not fit squeezenet@1.0.1: its samples are")
    assert "[8, 8]" in said
    assert "input 'data_0' takes samples of [3, 224, 224]" in said
    assert "leave out --dataset" in said


def test_a_framework_error_of_several_lines_becomes_one() -> None:
    onnxruntime = (
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: data_0\n"
        " index: 1 Got: 8 Expected: 3\n index: 2 Got: 8 Expected: 224\n"
        " Please fix either the inputs/outputs or the model.\n"
    )
    assert one_line(onnxruntime) == (
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: data_0; "
        "index: 1 Got: 8 Expected: 3; index: 2 Got: 8 Expected: 224; "
        "Please fix either the inputs/outputs or the model."
    )


# --version


def test_latest_is_the_newest_and_a_bare_version_pins_it() -> None:
    assert matches("2.0.0", "latest")
    assert matches("1.0.1", "1.0.1")
    assert not matches("1.0.2", "1.0.1")
    catalog = Catalog()
    for version in ("1.0.0", "1.4.2", "2.0.0"):
        catalog.learn(model_manifest("net", version))
    assert catalog.resolve("model", "net", "latest").version == "2.0.0"
    assert catalog.resolve("model", "net", "1.4.2").version == "1.4.2"


def test_a_version_that_is_none_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "squeezenet", "--version", "newest"], env={"DLSCOPE_HOME": str(tmp_path)}
    )
    assert result.exit_code == 2, result.output
    said = _said(result.output)
    assert "--version: 'newest' is not a version constraint" in said
    assert "an exact version such as 1.0.1, or latest" in said
    assert not (tmp_path / "dlscope.db").exists()


# A misspelt model, and the zoo's models not built yet


def test_a_misspelt_model_gets_the_nearest_names() -> None:
    catalog = Catalog()
    for name in ("squeezenet", "resnet50", "vgg19"):
        catalog.learn(model_manifest(name, "1.0.0"))
    with pytest.raises(ModelNotFound) as refused:
        catalog.resolve("model", "squeezenat")
    assert str(refused.value) == (
        "unknown model 'squeezenat'; did you mean: squeezenet? "
        "registered models: resnet50, squeezenet, vgg19"
    )


def test_the_run_of_an_unknown_model_names_the_zoo_models_built_on_first_use(
    tmp_path: Path,
) -> None:
    said = unknown_model("digits-cnm", ["resnet50", "squeezenet"], tmp_path)
    assert said.startswith("unknown model 'digits-cnm'; did you mean: digits-cnn")
    assert "registered models: resnet50, squeezenet; built on first use: digits-cnn, " in said
    # Once built (its manifest written), a zoo model is registered, not "built on first use".
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "smollm2.yaml").write_text("")
    assert "smollm2," not in unknown_model("x", [], tmp_path)


def test_the_model_list_shows_the_zoo_models_not_built_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A terminal wide enough for the list as one table (narrower, a block a model).
    monkeypatch.setattr(terminal.console, "_width", 200)
    environment = {"DLSCOPE_HOME": str(tmp_path), "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["models", "list"], env=environment)
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "squeezenet" in rows
    assert set(ZOO_MODELS) <= set(rows)
    assert set(ZOO_KINDS) == set(ZOO_MODELS)
    assert "built on first use (dlscope run smollm2)" in rows["smollm2"]
    assert "text-generation" in rows["smollm2"]

    only = CliRunner().invoke(app, ["models", "list", "--framework", "tensorflow"], env=environment)
    listed = [line.split("│")[1].strip() for line in only.output.splitlines() if "│" in line]
    assert listed == ["digits-cnn-tf"]


# The framework's own logs


def test_a_framework_process_output_is_logged_not_printed(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    banner = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to "
        b"STDERR\nI0000 port.cc:153] oneDNN custom operations are on.\n"
    )
    tail: collections.deque[str] = collections.deque(maxlen=10)
    with caplog.at_level(logging.ERROR):  # `dlscope run` without -v
        _read_output(io.BytesIO(banner), tail, "tensorflow")
    assert capsys.readouterr().err == ""
    assert not caplog.records
    assert list(tail)[-1] == "I0000 port.cc:153] oneDNN custom operations are on."  # kept

    with caplog.at_level(logging.INFO):  # -v, up, serve: with the services' logs
        _read_output(io.BytesIO(banner), tail, "tensorflow")
    assert [r.getMessage() for r in caplog.records][-1].startswith("tensorflow: I0000 port.cc")


def test_tensorflow_banner_on_import_is_kept_back_unless_the_import_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with _banner_kept_back():
        os.write(2, b"I0000 oneDNN custom operations are on\n")
    assert capfd.readouterr().err == ""

    def failing_import() -> None:
        with _banner_kept_back():
            os.write(2, b"why it failed\n")
            raise ImportError("tensorflow")

    with pytest.raises(ImportError):
        failing_import()
    assert capfd.readouterr().err == "why it failed\n"


# `up -f all`


def test_up_all_leaves_out_the_endpoint_without_a_server_saying_how_to_add_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        chosen = frameworks_to_serve("all", Settings(endpoint_url=None))
    assert "endpoint" not in chosen
    assert "onnxruntime" in chosen
    [said] = caplog.records
    assert said.levelno == logging.INFO
    assert "add one with --endpoint URL" in said.getMessage()
    served = Settings(endpoint_url="http://127.0.0.1:8000/v1")
    assert "endpoint" in frameworks_to_serve("all", served)
    assert frameworks_to_serve("onnxruntime,endpoint", Settings()) == ("onnxruntime", "endpoint")


def test_up_takes_the_endpoint_its_hint_names() -> None:
    result = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "200"})
    assert "--endpoint" in result.output


# Help that says what is there and what the code does


def test_the_models_help_names_only_commands_that_exist() -> None:
    result = CliRunner().invoke(app, ["models", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "show" not in result.output
    assert "list, register, deprecate" in result.output
    for command in ("list", "register", "deprecate"):
        assert CliRunner().invoke(app, ["models", command, "--help"]).exit_code == 0


def test_the_replay_help_says_where_letters_go() -> None:
    result = CliRunner().invoke(app, ["dlq", "replay", "--help"], env={"COLUMNS": "200"})
    said = _said(result.output.replace("│", ""))
    assert "straight to the queue of the service that refused it" in said
    assert "an event several services refused goes once to each of their queues" in said
    assert "to the exchange and routing key it was first published to" in said
    assert "`recorder` is the queue <DLSCOPE_NAMESPACE>.recorder" in said


# `dlscope publish`


def test_publish_says_how_to_follow_the_evaluation() -> None:
    evaluation = uuid.UUID("6c3f2b1e-0000-4000-8000-000000000001")
    said = _following(evaluation, "http://gateway:8080/")
    assert said.startswith(f"follow it at http://gateway:8080/evaluations/{evaluation} ")
    assert f"http://gateway:8080/v1/evaluations/{evaluation}/events" in said
    assert said.endswith(f"dlscope report {evaluation} --gateway http://gateway:8080")


# The broker, said without the password (against RabbitMQ: test_broker_refusals.py)


def test_a_refused_vhost_is_said_with_the_fix_and_without_the_password() -> None:
    said = _vhost_refused("amqp://guest:s3cret@127.0.0.1:5672/nope")
    assert said.startswith("RabbitMQ at 127.0.0.1:5672 refused vhost 'nope' (NOT_ALLOWED")
    assert "rabbitmqctl add_vhost nope" in said
    assert "s3cret" not in said
    assert "refused vhost '/'" in _vhost_refused("amqp://guest:guest@127.0.0.1/")


def test_an_unreachable_broker_is_said_with_the_fix() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    said = _unreachable("amqp://guest:s3cret@127.0.0.1:1/", refused)
    assert said.startswith("cannot connect to RabbitMQ at 127.0.0.1:1 (connection refused)")
    assert "s3cret" not in said
