"""Harness overhead: dlscope's measured latency against a bare loop on the same framework.

For each framework installed here and each model, in one process:
- dlscope: the worker's own code path, the predictor from ``frameworks.framework_for`` opened on
  the CPU and timed by ``shared.measurement.run_scenario`` around ``predictor.predict(inputs)``,
  exactly as ``services/workers/framework/sessions/inference.py`` measures;
- both again inside a ``FrameworkProcess`` (``services.workers.isolation``), where a worker
  has measured since every framework got its own process ("isolated" in the results);
- bare: a loop timing the same framework session (the predictor's own: one set of weights,
  one thread pool) called directly on the same input, with the same clock pair.

The machine is noisy, so the two alternate in blocks (A B A B ...; one query each for a
model of milliseconds) and the figure is the ratio of their p50 latencies; the median of the
rounds' ratios (with its 95 % bootstrap interval) and the difference in microseconds come
with it. Models: ``digits-cnn`` (tens of microseconds: the harness's share
is as large as it gets) and SqueezeNet 1.0 (milliseconds). The zoo has SqueezeNet as ONNX
only, so for pytorch the same architecture is built in torch (random weights: speed, not
accuracy), traced to TorchScript and exported with torch.export into a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import digits_manifests, median_ci95, percentiles
from services.workers.framework.frameworks import framework_for
from services.workers.framework.predictors import Predictor
from services.workers.framework.session import Session
from services.workers.framework.sessions.inputs import synthetic_inputs
from services.workers.handover import FrameworkCall, FrameworkOptions
from services.workers.isolation import FrameworkProcess
from shared.artifacts import ArtifactCache, sha256_of
from shared.config import REPOSITORY_ROOT
from shared.errors import ConfigurationError
from shared.manifests import FrameworkRequirement, ModelManifest, ModelSource, load_manifest
from shared.measurement import SingleStream, WarmupSettings, run_scenario

__all__ = ["run"]

SQUEEZENET = REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml"
TARGET_RATIO = 1.01
# Untimed queries before the rounds (caches, allocators, thread pools). Both sides then run
# the same session, so neither finds it colder than the other: no warm-up per block.
WARMUP = 50


@dataclass(frozen=True)
class Case:
    """One model on one framework: what to open, and how many queries a block takes."""

    framework: str
    model: str
    manifest: ModelManifest
    path: Path
    rounds: int
    per_round: int


MODELS = ("digits-cnn", "squeezenet")


async def run(
    scale: float = 1.0,
    *,
    warmup: int = WARMUP,
    models: tuple[str, ...] = MODELS,
    zoo: Path | None = None,
) -> dict[str, Any]:
    """``scale`` multiplies the number of rounds (0.1 for a quick look); ``warmup`` untimed
    queries open each case; ``models``: which of ``MODELS`` (each in every format); ``zoo``:
    a folder where ``build_digits`` has built the digits CNN already (built into a temporary
    folder otherwise)."""
    return await asyncio.to_thread(_run, scale, warmup, models, zoo)


def _run(scale: float, warmup: int, models: tuple[str, ...], zoo: Path | None) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dlscope-overhead-") as folder:
        for case in _cases(Path(folder), zoo, models, skipped):
            rounds = max(3, round(case.rounds * scale))
            result = _compare(case, rounds, warmup)
            result["isolated"] = asyncio.run(_compare_isolated(case, rounds, warmup, Path(folder)))
            results[f"{case.framework}/{case.model}"] = result
    return {
        "cases": results,
        "skipped": skipped,
        "target_ratio": TARGET_RATIO,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


def _cases(
    folder: Path, zoo: Path | None, chosen: tuple[str, ...], skipped: dict[str, str]
) -> list[Case]:
    artifacts = ArtifactCache(folder / "artifacts")
    digits = digits_manifests(folder / "zoo" if zoo is None else zoo)
    squeezenet = load_manifest(SQUEEZENET)
    assert isinstance(squeezenet, ModelManifest)
    cases = []
    for framework in ("onnxruntime", "pytorch"):
        try:
            framework_for(framework)
        except ConfigurationError as exc:
            skipped[framework] = str(exc)
            continue
        if framework == "onnxruntime":
            models = {"digits-cnn": digits["onnxruntime"], "squeezenet": squeezenet}
        else:
            models = _torch_models(folder / "torch", digits["pytorch"], squeezenet, chosen)
        for model, manifest in models.items():
            if model.partition(" ")[0] not in chosen:
                continue
            small = model.startswith("digits")
            cases.append(
                Case(
                    framework=framework,
                    model=model,
                    manifest=manifest,
                    path=artifacts.fetch(manifest.source),
                    # Short blocks, many rounds: drift on the shared machine hits both
                    # sides alike. A query of milliseconds alternates one by one.
                    rounds=200 if small else 300,
                    per_round=50 if small else 1,
                )
            )
    return cases


# Warm-up happens once, before the rounds, the same for both arms.
NO_WARMUP = WarmupSettings(max_windows=0)


def _compare(case: Case, rounds: int, warmup: int = WARMUP) -> dict[str, Any]:
    predictor = framework_for(case.framework).create()
    predictor.open(case.manifest, case.path, hardware="cpu")
    try:
        inputs = synthetic_inputs(case.manifest, batch_size=1, seed=0)
        loops = _bare_loops(case.framework, predictor, inputs)
        harness_ns: list[int] = []
        bare_ns: dict[str, list[int]] = {name: [] for name in loops}
        rounds_ns: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
        # The worker's path, as measurement.py measure runs it: run_scenario's single-stream
        # driver around predictor.predict on inputs built beforehand.
        run = predictor.predict
        warm = SingleStream(min_query_count=warmup, min_duration_s=0, warmup=NO_WARMUP)
        run_scenario(warm, lambda _: run(inputs))
        for loop in loops.values():
            loop(warmup, 1)
        one_round = SingleStream(min_query_count=case.per_round, min_duration_s=0, warmup=NO_WARMUP)
        for _ in range(rounds):
            timed = list(run_scenario(one_round, lambda _: run(inputs)).phases[0].latencies_ns)
            harness_ns += timed
            for name, loop in loops.items():
                direct = loop(1, case.per_round)  # one untimed query, as the driver's cold one
                bare_ns[name] += direct
                rounds_ns[name].append((statistics.median(timed), statistics.median(direct)))
        described = predictor.describe()
    finally:
        predictor.close()
    harness = percentiles([ns / 1e6 for ns in harness_ns])
    result: dict[str, Any] = {
        "predictor": described,
        "rounds": rounds,
        "queries_per_round": case.per_round,
        "dlscope": harness,
    }
    for name in loops:
        direct_ms = percentiles([ns / 1e6 for ns in bare_ns[name]])
        paired = rounds_ns[name]
        ratios = [ours / theirs for ours, theirs in paired]
        result[name] = {
            **direct_ms,
            "p50_ratio": harness["p50_ms"] / direct_ms["p50_ms"],
            "median_round_ratio": statistics.median(ratios),
            "median_round_ratio_ci95": median_ci95(ratios),
            "median_round_difference_us": statistics.median(o - t for o, t in paired) / 1e3,
        }
    return result


async def _compare_isolated(case: Case, rounds: int, warmup: int, home: Path) -> dict[str, Any]:
    """``_compare`` run inside a framework process, where a worker now measures: dlscope's
    driver against the bare loop in that same process. (Not against a loop in this process:
    two live sessions' thread pools, spinning after each query, would slow each other.)"""
    framework = FrameworkProcess(case.framework, "cpu", options=FrameworkOptions(home=home))
    try:
        result = await framework.call(COMPARE_IN_SESSION, case, rounds, warmup)
    finally:
        await framework.close()
    return result


def compare_in_session(
    session: Session, case: Case, rounds: int, warmup: int = WARMUP
) -> dict[str, Any]:
    """In the framework process: the same comparison as in this one."""
    return _compare(case, rounds, warmup)


# The call a framework process makes of it: named, as every call across the pipe is
# (services.workers.handover), so the worker side never imports this module's framework.
COMPARE_IN_SESSION = FrameworkCall(f"{__name__}:compare_in_session", dict)


BareLoop = Callable[[int, int], list[int]]


def _bare_loops(
    framework: str, predictor: Predictor, inputs: dict[str, np.ndarray]
) -> dict[str, BareLoop]:
    """Timed loops over the framework's own call, on the predictor's own session (one set of
    weights, one thread pool): what a user would write to time the model without dlscope.

    ``bare`` calls the framework on the input as the framework takes it. For torch that is a
    tensor made once; ``bare_numpy_io`` also makes the tensor from the numpy array and the
    answer's array from the tensor on every query, as anything fed numpy must, so the
    difference between the two is the price of numpy in and out, not of dlscope.
    """
    clock = time.perf_counter_ns
    if framework == "onnxruntime":
        session: Any = predictor._session  # type: ignore[attr-defined]  # the same session

        def onnxruntime_loop(warmup: int, iterations: int) -> list[int]:
            for _ in range(warmup):
                session.run(None, inputs)
            latencies = [0] * iterations
            for i in range(iterations):
                start = clock()
                session.run(None, inputs)
                latencies[i] = clock() - start
            return latencies

        return {"bare": onnxruntime_loop}

    import torch

    module: Any = predictor._module  # type: ignore[attr-defined]  # the same module
    names: list[str] = predictor._input_names  # type: ignore[attr-defined]  # its order
    arrays = [inputs[name] for name in names]
    tensors = [torch.from_numpy(array) for array in arrays]

    def torch_loop(warmup: int, iterations: int) -> list[int]:
        for _ in range(warmup):
            with torch.inference_mode():
                module(*tensors)
        latencies = [0] * iterations
        for i in range(iterations):
            start = clock()
            with torch.inference_mode():
                module(*tensors)
            latencies[i] = clock() - start
        return latencies

    def numpy_io_loop(warmup: int, iterations: int) -> list[int]:
        for _ in range(warmup):
            with torch.inference_mode():
                module(*[torch.from_numpy(array) for array in arrays]).numpy()
        latencies = [0] * iterations
        for i in range(iterations):
            start = clock()
            with torch.inference_mode():
                module(*[torch.from_numpy(array) for array in arrays]).numpy()
            latencies[i] = clock() - start
        return latencies

    return {"bare": torch_loop, "bare_numpy_io": numpy_io_loop}


def _torch_models(
    folder: Path, digits: ModelManifest, squeezenet: ModelManifest, chosen: tuple[str, ...]
) -> dict[str, ModelManifest]:
    """digits-cnn as TorchScript (the zoo's) and as a torch.export program, and SqueezeNet
    1.0 in both formats: the same architecture as the ONNX graph, random weights."""
    import torch

    from dlscope.zoo.export import _torchscript_allowed
    from dlscope.zoo.training import digits_cnn

    folder.mkdir(parents=True)
    with _torchscript_allowed():
        weights = torch.jit.load(digits.source.uri).state_dict()  # type: ignore[no-untyped-call]
    digits_module = digits_cnn()
    digits_module.load_state_dict(weights)
    torch.manual_seed(0)
    squeezenet_module = _squeezenet()
    models = {"digits-cnn": digits}
    dynamic = ({0: torch.export.Dim("batch")},)
    for name, module, example, manifest, shapes in (
        ("digits-cnn", digits_module, torch.zeros(2, 1, 8, 8), digits, dynamic),
        ("squeezenet", squeezenet_module, torch.zeros(1, 3, 224, 224), squeezenet, None),
    ):
        if name not in chosen:
            continue
        module.eval()
        exported = folder / f"{name}.pt2"
        program = torch.export.export(module, (example,), dynamic_shapes=shapes)
        torch.export.save(program, str(exported))
        if name == "squeezenet":
            traced = folder / f"{name}.pt"
            with _torchscript_allowed(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]
                torch.jit.save(torch.jit.trace(module, example), str(traced))  # type: ignore[no-untyped-call]
            models[name] = _as_torch(manifest, traced)
        models[f"{name} (torch.export)"] = _as_torch(manifest, exported)
    return models


def _as_torch(manifest: ModelManifest, path: Path) -> ModelManifest:
    return manifest.model_copy(
        update={
            "framework": FrameworkRequirement(name="pytorch"),
            "source": ModelSource(uri=str(path), sha256=sha256_of(path)),
        }
    )


def _squeezenet() -> Any:
    """SqueezeNet 1.0 as the ONNX zoo graph has it: [N, 3, 224, 224] in, softmax [N, 1000, 1, 1]."""
    import torch
    from torch import nn

    class Fire(nn.Module):
        def __init__(self, inputs: int, squeeze: int, expand: int) -> None:
            super().__init__()
            self.squeeze = nn.Conv2d(inputs, squeeze, 1)
            self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
            self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.squeeze(x))
            return torch.cat([torch.relu(self.expand1x1(x)), torch.relu(self.expand3x3(x))], 1)

    class SqueezeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            pool = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.features = nn.Sequential(
                nn.Conv2d(3, 96, 7, stride=2),
                nn.ReLU(),
                pool,
                Fire(96, 16, 64),
                Fire(128, 16, 64),
                Fire(128, 32, 128),
                pool,
                Fire(256, 32, 128),
                Fire(256, 48, 192),
                Fire(384, 48, 192),
                Fire(384, 64, 256),
                pool,
                Fire(512, 64, 256),
            )
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Conv2d(512, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.classifier(self.features(x)), 1)

    return SqueezeNet()
