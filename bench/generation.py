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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import median_ci95, percentiles, smollm_manifests
from services.workers.framework.frameworks import framework_for
from services.workers.framework.generator import Generator
from services.workers.framework.predictors import Predictor
from services.workers.framework.sessions.prompts import prompt_ids
from shared.errors import ConfigurationError
from shared.manifests import ModelManifest
from shared.processing.text import load_tokenizer, synthetic_texts

__all__ = ["Batches", "run"]

TARGET_RATIO = 1.01
TOKENS = 32
BATCH_SIZES = (1, 2, 4, 8)
BATCH_PROMPTS = 8
BATCH_ROUNDS = 3
ROUNDS = 30
WARMUP = 3

# (prompt ids [1, n]) -> (prefill ns, decode ns for tokens 2..N)
BareLoop = Callable[[np.ndarray], tuple[int, int]]


@dataclass(frozen=True)
class Batches:
    """The batch part: ``prompts`` prompts generated at each of ``sizes``, ``rounds`` times."""

    sizes: tuple[int, ...] = BATCH_SIZES
    prompts: int = BATCH_PROMPTS
    rounds: int = BATCH_ROUNDS


@dataclass(frozen=True)
class Plan:
    """What each framework runs: ``rounds`` prompts after ``warmup`` of them, of ``tokens``
    tokens each, then the ``batches``."""

    rounds: int
    warmup: int
    tokens: int
    batches: Batches


async def run(
    scale: float = 1.0,
    *,
    tokens: int = TOKENS,
    warmup: int = WARMUP,
    batches: Batches | None = None,
    zoo: Path | None = None,
) -> dict[str, Any]:
    """``scale`` multiplies the number of rounds (0.2 for a quick look); ``tokens`` a request,
    after ``warmup`` requests untimed; ``zoo``: a folder where the zoo has built SmolLM2
    already (built into a temporary folder otherwise, a minute)."""
    plan = Plan(max(3, round(ROUNDS * scale)), warmup, tokens, batches or Batches())
    return await asyncio.to_thread(_run, plan, zoo)


def _run(plan: Plan, zoo: Path | None) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dlscope-generation-") as scratch:
        folder = zoo or Path(scratch)
        for framework, manifest in smollm_manifests(folder).items():
            try:
                framework_for(framework)
            except ConfigurationError as exc:
                skipped[framework] = str(exc)
                continue
            # Opened once for both parts: TorchScript's executor compiles on the first calls.
            with _opened(framework, manifest, folder, plan.tokens) as (predictor, generator):
                texts = _prompts(manifest, folder)
                results[framework] = _compare(
                    framework, predictor, generator, texts(plan.rounds, 0), plan
                )
                results[framework]["batches"] = _batches(
                    generator, texts(plan.batches.prompts, 1), plan
                )
    return {
        "model": "smollm2 (SmolLM2-135M-Instruct, float32)",
        "tokens_per_request": plan.tokens,
        "frameworks": results,
        "skipped": skipped,
        "target_ratio": TARGET_RATIO,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


@contextlib.contextmanager
def _opened(
    framework: str, manifest: ModelManifest, folder: Path, tokens: int
) -> Iterator[tuple[Predictor, Generator]]:
    """The model open on ``framework`` and its generator (``tokens`` tokens a request, end of
    sequence ignored); closed after."""
    predictor = framework_for(framework).create()
    predictor.open(manifest, folder / Path(manifest.source.uri).name, hardware="cpu")
    try:
        yield predictor, Generator(manifest, predictor.predict, tokens, ignore_eos=True)
    finally:
        predictor.close()


def _prompts(manifest: ModelManifest, folder: Path) -> Callable[[int, int], list[np.ndarray]]:
    """``count`` prompts of 64 vocabulary words, seeded by ``seed``."""
    assert manifest.tokenizer is not None
    tokenizer = load_tokenizer(str(folder / Path(manifest.tokenizer.uri).name))

    def texts(count: int, seed: int) -> list[np.ndarray]:
        return prompt_ids(manifest, synthetic_texts(tokenizer, count, 64, seed=seed), tokenizer)

    return texts


def _compare(
    framework: str, predictor: Predictor, generator: Generator, asked: list[np.ndarray], plan: Plan
) -> dict[str, Any]:
    tokens, rounds = plan.tokens, plan.rounds
    bare = _bare_loop(framework, predictor, generator, tokens)
    for prompt in asked[: plan.warmup]:
        generator.generate(prompt)
        bare(prompt)
    ours_ttft, ours_tpot, bare_ttft, bare_tpot = [], [], [], []
    for prompt in asked:
        generated = generator.generate(prompt)
        first, last = generated.token_ns[0], generated.token_ns[-1]
        ours_ttft.append(first - generated.issued_ns)
        ours_tpot.append((last - first) / (tokens - 1))
        prefill, decode = bare(prompt)
        bare_ttft.append(prefill)
        bare_tpot.append(decode / (tokens - 1))
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


def _batches(generator: Generator, asked: list[np.ndarray], plan: Plan) -> dict[str, Any]:
    """Output tokens/s and step time at each batch size, on the same prompts."""
    batches, tokens = plan.batches, plan.tokens
    alone = [generator.generate(prompt).tokens for prompt in asked]
    walls: dict[int, list[float]] = {size: [] for size in batches.sizes}
    steps: dict[int, list[float]] = {size: [] for size in batches.sizes}
    agree: dict[int, bool] = {size: True for size in batches.sizes}
    for _ in range(batches.rounds):
        for size in batches.sizes:
            start = time.perf_counter_ns()
            done = []
            for first in range(0, batches.prompts, size):
                done.extend(generator.generate_batch(asked[first : first + size]))
            walls[size].append((time.perf_counter_ns() - start) / 1e9)
            for g in done:
                steps[size].extend(np.diff(g.token_ns) / 1e6)
            agree[size] &= [g.tokens for g in done] == alone
    return {
        f"batch_{size}": {
            "output_tokens_per_s": batches.prompts * tokens / statistics.median(walls[size]),
            "step_ms_median": statistics.median(steps[size]),
            "same_tokens_as_alone": agree[size],
        }
        for size in batches.sizes
    }


def _bare_loop(framework: str, predictor: Predictor, generator: Generator, tokens: int) -> BareLoop:
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
            for step in range(1, tokens):
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
            for step in range(1, tokens):
                mask = torch.ones((1, prompt.shape[1] + step), dtype=torch.int64)
                logits, key, value = module(torch.from_numpy(token), mask, key, value)
                token = np.asarray([[int(np.argmax(logits.numpy()[0]))]], dtype=np.int64)
            return prefilled - start, clock() - prefilled

    return torch_loop
