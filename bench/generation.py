"""Generation: dlscope's TTFT and TPOT against a bare generation loop on the same model, in the
same process, and ONNX Runtime against PyTorch on SmolLM2-135M-Instruct.

For each framework installed here (the zoo's ``smollm2`` exports, built into a temporary
folder):
- dlscope: the worker's own generator (``services.workers.framework.generator.Generator``)
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

Then batches: the same prompts generated ``BATCH_PROMPTS`` at a time in batches of 1, 2, 4 and
8 (left-padded, with the attention mask), the sizes taking turns round by round: output
tokens/s, the median step time (each row's TPOT), and whether every row's greedy tokens are
those the prompt gets alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import median_ci95, percentiles
from services.workers.framework.frameworks import framework_for
from services.workers.framework.generator import Generator
from services.workers.framework.predictors import Predictor
from services.workers.framework.sessions.prompts import prompt_ids
from shared.errors import ConfigurationError
from shared.manifests import ModelManifest
from shared.processing.text import load_tokenizer, synthetic_texts

__all__ = ["run"]

TARGET_RATIO = 1.01
TOKENS = 32
BATCH_SIZES = (1, 2, 4, 8)
BATCH_PROMPTS = 8
BATCH_ROUNDS = 3
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
                framework_for(framework)
            except ConfigurationError as exc:
                skipped[framework] = str(exc)
                continue
            rounds = max(3, round(ROUNDS * scale))
            results[framework] = _compare(framework, manifest, Path(folder), rounds)
            results[framework]["batches"] = _batches(framework, manifest, Path(folder))
    return {
        "model": "smollm2 (SmolLM2-135M-Instruct, float32)",
        "tokens_per_request": TOKENS,
        "frameworks": results,
        "skipped": skipped,
        "target_ratio": TARGET_RATIO,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


@contextlib.contextmanager
def _opened(
    framework: str, manifest: ModelManifest, folder: Path, count: int, seed: int
) -> Iterator[tuple[Predictor, Generator, list[np.ndarray]]]:
    """The model open on ``framework``, its generator (``TOKENS`` tokens a request, end of
    sequence ignored) and ``count`` seeded prompts of 64 vocabulary words; closed after."""
    assert manifest.tokenizer is not None
    tokenizer = load_tokenizer(str(folder / Path(manifest.tokenizer.uri).name))
    asked = prompt_ids(manifest, synthetic_texts(tokenizer, count, 64, seed=seed), tokenizer)
    predictor = framework_for(framework).create()
    predictor.open(manifest, folder / Path(manifest.source.uri).name, hardware="cpu")
    try:
        yield predictor, Generator(manifest, predictor.predict, TOKENS, ignore_eos=True), asked
    finally:
        predictor.close()


def _compare(framework: str, manifest: ModelManifest, folder: Path, rounds: int) -> dict[str, Any]:
    with _opened(framework, manifest, folder, rounds, seed=0) as (predictor, generator, asked):
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


def _batches(framework: str, manifest: ModelManifest, folder: Path) -> dict[str, Any]:
    """Output tokens/s and step time at each batch size, on the same prompts."""
    with _opened(framework, manifest, folder, BATCH_PROMPTS, seed=1) as (_, generator, asked):
        alone = [generator.generate(prompt).tokens for prompt in asked]
        walls: dict[int, list[float]] = {size: [] for size in BATCH_SIZES}
        steps: dict[int, list[float]] = {size: [] for size in BATCH_SIZES}
        agree: dict[int, bool] = {size: True for size in BATCH_SIZES}
        for _ in range(BATCH_ROUNDS):
            for size in BATCH_SIZES:
                start = time.perf_counter_ns()
                done = []
                for first in range(0, BATCH_PROMPTS, size):
                    done.extend(generator.generate_batch(asked[first : first + size]))
                walls[size].append((time.perf_counter_ns() - start) / 1e9)
                for g in done:
                    steps[size].extend(np.diff(g.token_ns) / 1e6)
                agree[size] &= [g.tokens for g in done] == alone
    return {
        f"batch_{size}": {
            "output_tokens_per_s": BATCH_PROMPTS * TOKENS / statistics.median(walls[size]),
            "step_ms_median": statistics.median(steps[size]),
            "same_tokens_as_alone": agree[size],
        }
        for size in BATCH_SIZES
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
                    "attention_mask": np.ones_like(prompt),
                    "past_key": empty["past_key"],
                    "past_value": empty["past_value"],
                },
            )
            token = np.asarray([[int(np.argmax(logits[0]))]], dtype=np.int64)
            prefilled = clock()
            for step in range(1, TOKENS):
                mask = np.ones((1, prompt.shape[1] + step), dtype=np.int64)
                logits, key, value = session.run(
                    None,
                    {
                        "input_ids": token,
                        "attention_mask": mask,
                        "past_key": key,
                        "past_value": value,
                    },
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
                torch.from_numpy(np.ones_like(prompt)),
                torch.from_numpy(empty["past_key"]),
                torch.from_numpy(empty["past_value"]),
            )
            token = np.asarray([[int(np.argmax(logits.numpy()[0]))]], dtype=np.int64)
            prefilled = clock()
            for step in range(1, TOKENS):
                mask = torch.ones((1, prompt.shape[1] + step), dtype=torch.int64)
                logits, key, value = module(torch.from_numpy(token), mask, key, value)
                token = np.asarray([[int(np.argmax(logits.numpy()[0]))]], dtype=np.int64)
            return prefilled - start, clock() - prefilled

    return torch_loop
