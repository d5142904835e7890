"""A served model no manifest names (``--served-model NAME --tokenizer FILE``): the manifest
dlscope writes for it (framework endpoint, no file of its own, the server's name kept, the
tokenizer pinned), the same each time; what a manifest without a file may and may not be;
and the options refused before anything is registered or run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlscope.cli import app
from dlscope.served import served_manifest, served_manifest_name
from harness.stub_tokenizer import write_stub_tokenizer
from shared.artifacts.digests import sha256_of
from shared.errors import ManifestError, ProcessingError
from shared.manifests import parse_manifest


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    return write_stub_tokenizer(tmp_path / "tokenizer.json")


def test_a_served_model_gets_a_manifest_of_its_own_with_no_file(tokenizer: Path) -> None:
    manifest = served_manifest("meta-llama/Llama-3.1-8B-Instruct", tokenizer, context_length=8192)
    assert manifest.name == "served-meta-llama-llama-3.1-8b-instruct"
    assert manifest.served_name == "meta-llama/Llama-3.1-8B-Instruct"  # what requests ask for
    assert manifest.framework.name == "endpoint"
    assert manifest.frameworks == ("endpoint",)  # no other framework has a file to run
    assert manifest.served
    assert manifest.source is None
    assert list(manifest.sources) == ["tokenizer"]  # the one file a worker fetches
    assert manifest.sources["tokenizer"].sha256 == sha256_of(tokenizer)
    assert manifest.generation is not None
    assert manifest.generation.context_length == 8192
    # The same server's name, tokenizer and context: the same manifest, so registering it
    # again changes nothing and the evaluation can be repeated by its name.
    assert served_manifest("meta-llama/Llama-3.1-8B-Instruct", tokenizer, context_length=8192) == (
        manifest
    )


@pytest.mark.parametrize(
    ("served", "name"),
    [
        ("smollm2", "served-smollm2"),
        ("Qwen/Qwen3-0.6B", "served-qwen-qwen3-0.6b"),
        ("  my model: v2 ", "served-my-model-v2"),
    ],
)
def test_a_served_name_becomes_a_manifest_name_apart_from_the_zoos(served: str, name: str) -> None:
    assert served_manifest_name(served) == name


def test_a_served_name_without_a_letter_or_digit_is_refused() -> None:
    with pytest.raises(ManifestError, match="needs a letter or a digit"):
        served_manifest_name("//")


def test_a_tokenizer_that_is_missing_or_no_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file"):
        served_manifest("smollm2", tmp_path / "absent.json")
    (tmp_path / "notes.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ProcessingError, match=r"notes\.json is not a tokenizer\.json"):
        served_manifest("smollm2", tmp_path / "notes.json")


def _document(tokenizer: Path, **changes: object) -> dict[str, object]:
    document = served_manifest("smollm2", tokenizer).model_dump(mode="json", exclude_none=True)
    document.update(changes)
    return document


def test_only_a_served_model_may_have_no_file(tokenizer: Path) -> None:
    with pytest.raises(ManifestError, match="source: a model onnxruntime runs needs its file"):
        parse_manifest(_document(tokenizer, framework={"name": "onnxruntime"}), origin="m")
    file = {"uri": str(tokenizer), "sha256": sha256_of(tokenizer)}
    with pytest.raises(ManifestError, match="has no file of its own"):
        parse_manifest(_document(tokenizer, source=file), origin="m")
    unserved = _document(tokenizer)
    del unserved["tokenizer"]
    unserved["inputs"] = [{"name": "input_ids", "element_type": "int64", "shape": [1, -1]}]
    with pytest.raises(ManifestError, match="give it generation and tokenizer"):
        parse_manifest(unserved, origin="m")


def test_a_served_name_holding_control_characters_is_refused(tokenizer: Path) -> None:
    with pytest.raises(ManifestError, match="served_as"):
        parse_manifest(_document(tokenizer, served_as="smollm2\x00"), origin="m")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([], "name a model (e.g. squeezenet"),
        (["--served-model", "stub"], "--served-model needs --tokenizer FILE"),
        (["--tokenizer", "t.json", "squeezenet"], "--tokenizer goes with --served-model"),
        (["--served-model", "stub", "squeezenet"], "leave out 'squeezenet'"),
        (["--served-model", "stub", "-f", "pytorch", "--tokenizer", "t.json"], "not 'pytorch'"),
    ],
)
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_served_options_that_cannot_work_are_refused_before_anything_runs(
    command: str, given: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLSCOPE_HOME", str(tmp_path))
    result = CliRunner().invoke(app, [command, *given])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())
    assert not (tmp_path / "dlscope.db").exists()  # nothing registered, nothing stored
