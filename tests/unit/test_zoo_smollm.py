"""SmolLM2-135M-Instruct in the zoo: real weights from a GGUF file, the same greedy tokens from
ONNX Runtime and TorchScript, and the tokenizer rebuilt from the file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from dlscope.zoo import smollm
from dlscope.zoo.export import load_torchscript
from shared.errors import PredictorError
from shared.manifests import ModelManifest
from shared.processing.text import load_tokenizer


@pytest.fixture
def built(smollm2_zoo: dict[str, ModelManifest]) -> dict[str, ModelManifest]:
    return smollm2_zoo


def _cache(manifest: ModelManifest) -> tuple[int, ...]:
    # The manifest's cache shape, for a batch of one and no position yet.
    past_key = next(spec for spec in manifest.inputs if spec.name == "past_key")
    layers, _, kv_heads, _, head_dim = past_key.shape
    return (layers, 1, kv_heads, 0, head_dim)


def test_the_model_knows_the_capital_of_france(built: dict[str, ModelManifest]) -> None:
    manifest = built["onnxruntime"]
    assert manifest.tokenizer is not None
    tokenizer = load_tokenizer(manifest.tokenizer.uri)
    prompt = tokenizer.encode("The capital of France is").ids
    step = smollm._onnx_step(Path(manifest.source.uri))
    tokens = smollm.greedy(step, _cache(manifest), prompt, 3)
    assert tokenizer.decode(tokens).startswith(" Paris")
    assert manifest.attributes["check_output"].startswith(" Paris")


def test_onnx_and_torchscript_generate_the_same_tokens(built: dict[str, ModelManifest]) -> None:
    onnx, script = built["onnxruntime"], built["pytorch"]
    assert onnx.tokenizer is not None
    tokenizer = load_tokenizer(onnx.tokenizer.uri)
    prompt = tokenizer.encode("Once upon a time, in a small village,").ids
    cache = _cache(onnx)
    ours = smollm.greedy(smollm._onnx_step(Path(onnx.source.uri)), cache, prompt, 12)
    module = load_torchscript(Path(script.source.uri))
    theirs = smollm.greedy(smollm._torch_step(module), cache, prompt, 12)
    assert ours == theirs


def test_prompts_of_different_lengths_in_one_batch_get_the_tokens_each_gets_alone(
    built: dict[str, ModelManifest],
) -> None:
    manifest = built["onnxruntime"]
    assert manifest.tokenizer is not None
    assert manifest.generation is not None
    assert manifest.generation.attention_mask == "attention_mask"
    tokenizer = load_tokenizer(manifest.tokenizer.uri)
    asked = [tokenizer.encode(text).ids for text in ("Hello", "Once upon a time, in a village,")]
    assert len(asked[0]) < len(asked[1])
    step = smollm._onnx_step(Path(manifest.source.uri))
    cache = _cache(manifest)
    together = smollm.greedy_batch(step, cache, asked, 8)
    assert together == [smollm.greedy(step, cache, prompt, 8) for prompt in asked]


def test_the_tokenizer_splits_digits_and_keeps_chat_tokens_whole(
    built: dict[str, ModelManifest],
) -> None:
    manifest = built["onnxruntime"]
    assert manifest.tokenizer is not None
    tokenizer = load_tokenizer(manifest.tokenizer.uri)
    encoded = tokenizer.encode("<|im_start|>user\nIn 2024<|im_end|>")
    assert encoded.tokens[0] == "<|im_start|>"
    assert encoded.tokens[-1] == "<|im_end|>"
    assert encoded.tokens[-5:-1] == ["2", "0", "2", "4"]
    assert tokenizer.decode(tokenizer.encode("naïve café").ids) == "naïve café"


def test_the_manifests_describe_how_to_drive_a_generation(
    built: dict[str, ModelManifest],
) -> None:
    for manifest in built.values():
        generation = manifest.generation
        assert generation is not None
        assert manifest.task == "text-generation"
        assert generation.context_length == 8192
        assert generation.eos_token_ids == [2]
        assert generation.chat_template is not None
        assert "<|im_start|>" in generation.chat_template
        assert [c.past for c in generation.cache] == ["past_key", "past_value"]
    assert built["onnxruntime"].tokenizer == built["pytorch"].tokenizer


def test_building_again_pins_the_same_onnx_file(
    built: dict[str, ModelManifest], tmp_path: Path
) -> None:
    again = {m.framework.name: m for m, _ in smollm.build_smollm(tmp_path)}
    ours, theirs = again["onnxruntime"], built["onnxruntime"]
    assert ours.source.sha256 == theirs.source.sha256
    assert ours.tokenizer is not None
    assert theirs.tokenizer is not None
    assert ours.tokenizer.sha256 == theirs.tokenizer.sha256


def test_the_opencl_engine_refuses_the_graph_naming_what_it_lacks(
    built: dict[str, ModelManifest],
) -> None:
    from services.workers.framework.opencl.engine import prepare
    from services.workers.framework.opencl.graph import load_graph

    with pytest.raises(PredictorError, match=r"does not support \d+ operator type\(s\)") as caught:
        prepare(load_graph(Path(built["onnxruntime"].source.uri)))
    assert "ReduceMean" in str(caught.value)  # RMSNorm's


def test_a_drawn_workload_runs_in_process_each_prompt_at_its_own_lengths(
    built: dict[str, ModelManifest], tmp_path: Path
) -> None:
    # The workload's rows are the same wherever the model runs: here offline batches of
    # four, each row stopping at its own drawn output length, its prompt of its drawn length.
    from services.workers.framework.frameworks import framework_for
    from services.workers.framework.generator import InProcessBackend
    from services.workers.framework.sessions import GenerationSession
    from services.workers.handover import JobInputs
    from shared.measurement.workload import WORKLOAD_ROWS, draw_lengths
    from shared.messages import RunEvaluation, Scenario
    from shared.messages.lengths import parse_lengths

    manifest = built["onnxruntime"]
    assert manifest.tokenizer is not None
    scenario = {
        "name": "offline",
        "batch_size": 4,
        "iterations": 8,
        "warmup": 0,
        "min_duration_s": 0,
        # Wide enough that a request matching a row by chance is unlikely: ~990 pairs, 512 rows.
        "input_tokens": parse_lengths("uniform:3-200").model_dump(),
        "output_tokens": parse_lengths("uniform:1-5").model_dump(),
    }
    job = RunEvaluation(
        evaluation_id=uuid.uuid4(),
        manifest=manifest,
        framework="onnxruntime",
        framework_version="*",
        hardware="cpu",
        scenario=Scenario.model_validate(scenario),
    )
    backend = InProcessBackend(framework_for("onnxruntime").create())
    inputs = JobInputs(
        model=Path(manifest.source.uri),
        results_dir=tmp_path,
        tokenizer=Path(manifest.tokenizer.uri),
    )
    run = GenerationSession(backend).measure(job, inputs)
    assert run.generation is not None
    rows = set(
        zip(
            draw_lengths(parse_lengths("uniform:3-200"), WORKLOAD_ROWS, seed=0, purpose="input"),
            draw_lengths(parse_lengths("uniform:1-5"), WORKLOAD_ROWS, seed=0, purpose="output"),
            strict=True,
        )
    )
    requests = run.generation.requests
    assert len(requests) >= 8
    assert len({len(r.token_ns) for r in requests}) > 1
    # Each request is one row, at that row's prompt and output lengths; the model's steps (its
    # chat template) add the same tokens to every prompt.
    adds = {r.input_tokens - n for r in requests[:1] for n, _ in rows}
    assert any(
        all((r.input_tokens - add, len(r.token_ns)) in rows for r in requests) for add in adds
    )
