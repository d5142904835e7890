"""Generation: dlscope's TTFT and TPOT against a bare generation loop on the same model, in the
same process, and ONNX Runtime against PyTorch on SmolLM2-135M-Instruct.

For each framework installed here (the zoo's ``smollm2`` exports, built into a temporary
folder):
- dlscope: the worker's own generator (``services.workers.framework.generation.Generator``)
  around the predictor's ``predict``, which keeps every token's time;
- bare: what a user would write, on the predictor's own session (one set of weights, one
  thread pool): prefill, then decode steps feeding the cache back, greedy, with one clock
  read before the prompt, one after the first token and one after the last, nothing per
  token. For torch it calls the module on tensors and takes the answer back as numpy, as
  anything that feeds a numpy prompt must.

The two alternate request by request on the same prompts (A B A B ...), so drift on the
shared machine hits both alike. The figures: each side's TTFT and TPOT medians, and the
median over rounds of dlscope's TPOT / bare TPOT with its 95 % bootstrap interval: the
harness's cost per token, recording every token's time included (the goal: under 1 %).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import median_ci95, percentiles
from services.workers.framework.generation import Generator, prompts
from services.workers.framework.predictors import Predictor, predictor_factory
from shared.errors import ConfigurationError
from shared.manifests import ModelManifest
from shared.processing.text import load_tokenizer, synthetic_texts

__all__ = ["run"]

TARGET_RATIO = 1.01
TOKENS = 32
ROUNDS = 30
WARMUP = 3

# (prompt ids [1, n]) -> (prefill ns, decode ns for tokens 2..N)
BareLoop = Callable[[np.ndarray], tuple[int, int]]


async def run(scale: float = 1.0) -> dict[str, Any]:
    """``scale`` multiplies the number of rounds (0.2 for a quick look)."""
    return await asyncio.to_thread(_run, scale)


def _run(scale: float) -> dict[str, Any]:
    from dlscope.zoo.smollm import build_smollm

    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dlscope-generation-") as folder:
        built = {m.framework.name: m for m, _ in build_smollm(Path(folder))}
        for framework, manifest in built.items():
            try:
                predictor_factory(framework)
            except ConfigurationError as exc:
                skipped[framework] = str(exc)
                continue
            rounds = max(3, round(ROUNDS * scale))
            results[framework] = _compare(framework, manifest, Path(folder), rounds)
    return {
        "model": "smollm2 (SmolLM2-135M-Instruct, float32)",
        "tokens_per_request": TOKENS,
        "frameworks": results,
        "skipped": skipped,
        "target_ratio": TARGET_RATIO,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


def _compare(framework: str, manifest: ModelManifest, folder: Path, rounds: int) -> dict[str, Any]:
    assert manifest.tokenizer is not None
    tokenizer = load_tokenizer(str(folder / Path(manifest.tokenizer.uri).name))
    asked = prompts(manifest, synthetic_texts(tokenizer, rounds, 64, seed=0), tokenizer)
    predictor = predictor_factory(framework).create()
    predictor.open(manifest, folder / Path(manifest.source.uri).name, hardware="cpu")
    try:
        generator = Generator(manifest, predictor.predict, TOKENS, ignore_eos=True)
        bare = _bare_loop(framework, predictor, generator)
        for prompt in asked[:WARMUP]:
            generator.generate(prompt)
            bare(prompt)
        ours_ttft, ours_tpot, bare_ttft, bare_tpot = [], [], [], []
        for prompt in asked:
            generated = generator.generate(prompt)
            first, last = generated.token_ns[0], generated.token_ns[-1]
            ours_ttft.append(first - generated.issued_ns)
            ours_tpot.append((last - first) / (TOKENS - 1))
            prefill, decode = bare(prompt)
            bare_ttft.append(prefill)
            bare_tpot.append(decode / (TOKENS - 1))
        described = predictor.describe()
    finally:
        predictor.close()
    ratios = [ours / theirs for ours, theirs in zip(ours_tpot, bare_tpot, strict=True)]
    tpot_ms = statistics.median(ours_tpot) / 1e6
    return {
        "predictor": described,
        "rounds": rounds,
        "dlscope": {
            "ttft": percentiles([ns / 1e6 for ns in ours_ttft]),
            "tpot": percentiles([ns / 1e6 for ns in ours_tpot]),
            "output_tokens_per_s": 1e3 / tpot_ms,
        },
        "bare": {
            "ttft": percentiles([ns / 1e6 for ns in bare_ttft]),
            "tpot": percentiles([ns / 1e6 for ns in bare_tpot]),
        },
        "tpot_median_round_ratio": statistics.median(ratios),
        "tpot_median_round_ratio_ci95": median_ci95(ratios),
        "ttft_median_ratio": statistics.median(ours_ttft) / statistics.median(bare_ttft),
    }


def _bare_loop(framework: str, predictor: Predictor, generator: Generator) -> BareLoop:
    """The user's own loop on the predictor's session: three clock reads a request."""
    clock = time.perf_counter_ns
    empty = generator.empty_cache()
    if framework == "onnxruntime":
        session: Any = predictor._session  # type: ignore[attr-defined]  # the same session

        def onnxruntime_loop(prompt: np.ndarray) -> tuple[int, int]:
            start = clock()
            logits, key, value = session.run(
                None,
                {
                    "input_ids": prompt,
                    "past_key": empty["past_key"],
                    "past_value": empty["past_value"],
                },
            )
            token = np.asarray([[int(np.argmax(logits[0]))]], dtype=np.int64)
            prefilled = clock()
            for _ in range(TOKENS - 1):
                logits, key, value = session.run(
                    None, {"input_ids": token, "past_key": key, "past_value": value}
                )
                token = np.asarray([[int(np.argmax(logits[0]))]], dtype=np.int64)
            return prefilled - start, clock() - prefilled

        return onnxruntime_loop

    import torch

    module: Any = predictor._module  # type: ignore[attr-defined]  # the same module

    def torch_loop(prompt: np.ndarray) -> tuple[int, int]:
        with torch.inference_mode():
            start = clock()
            logits, key, value = module(
                torch.from_numpy(prompt),
                torch.from_numpy(empty["past_key"]),
                torch.from_numpy(empty["past_value"]),
            )
            token = np.asarray([[int(np.argmax(logits.numpy()[0]))]], dtype=np.int64)
            prefilled = clock()
            for _ in range(TOKENS - 1):
                logits, key, value = module(torch.from_numpy(token), key, value)
                token = np.asarray([[int(np.argmax(logits.numpy()[0]))]], dtype=np.int64)
            return prefilled - start, clock() - prefilled

    return torch_loop
