"""The measurement session: what runs in the framework's own process for one job.

load -> noise probe -> cold query, warm-up, timed queries (each timed loop between two
snapshots of the machine) -> noise probe -> accuracy (with a dataset) -> output
fingerprint -> the traced passes the job's trace level asks for (``profiling``), after the
timed queries and on the same inputs, so tracing never enters the headline

The process's peak memory is reset as the job starts and read as it ends (it outlives jobs).

Nothing here talks to the broker or to the event loop: the session runs on the child
process's main thread (``services.workers.framework.session``), alone, and hands back a ``Run``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from services.workers.framework.accuracy import batches, measure_accuracy
from services.workers.framework.fingerprint import (
    NOT_CLASSES,
    input_identity,
    output_fingerprint,
)
from services.workers.framework.generative import measure_generation
from services.workers.framework.inputs import (
    FINGERPRINT_SEED,
    SYNTHETIC_SAMPLES,
    fingerprint_inputs,
    query_inputs,
    query_sizes,
)
from services.workers.framework.predictors import PredictorFactory
from services.workers.framework.profiling import trace
from services.workers.handover import Run
from shared.datasets import Dataset, load_dataset
from shared.errors import DlscopeError, PredictorError
from shared.manifests import ModelManifest
from shared.measurement import check_sample_count, run_scenario
from shared.measurement.cost import JobReadings, peak_memory, reset_peak_memory
from shared.measurement.loadgen import run_loadgen
from shared.measurement.noise import NoiseProbe, probe_ns
from shared.measurement.progress import OnStep, Step, ignore_steps
from shared.measurement.readings import MachineWatch
from shared.messages import OutputFingerprint, RunEvaluation
from shared.processing import postprocess
from shared.processing.text import load_tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["ACCURACY_BATCH", "measure", "nvml_index"]

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
# Tells the supervising process what the session is doing, so that a crash can be named
# by its phase ("while loading the model"). Called between phases, never in a timed loop.
# Accuracy runs the whole dataset through the model in batches of this size (a model with a
# fixed batch dimension gets its own), independent of the timed scenario's query sizes.
ACCURACY_BATCH = 32


def measure(
    factory: PredictorFactory,
    job: RunEvaluation,
    path: Path,
    *,
    results_dir: Path,
    on_step: OnStep = ignore_steps,
    tokenizer_path: Path | None = None,
) -> Run:
    """Load the model, run the scenario, then (with a dataset) measure accuracy, then record
    the output fingerprint, then run the traced passes the job's trace level asks for.

    The queries run on inputs built before timing starts, one batch per query size the
    scenario uses: the dataset's first samples, or seeded synthetic inputs. So a latency
    is the framework call on ready inputs and nothing else."""
    if job.manifest.generation is not None:
        return measure_generation(
            factory,
            job,
            path,
            on_step=on_step,
            tokenizer_path=tokenizer_path,
            results_dir=results_dir,
        )
    mark = reset_peak_memory()
    on_step(Step("preparing the inputs"))
    scenario = job.scenario.measurement()
    dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
    sample_count = len(dataset) if dataset is not None else SYNTHETIC_SAMPLES
    check_sample_count(scenario, sample_count)  # before the model is loaded
    tokenizer = None if tokenizer_path is None else load_tokenizer(str(tokenizer_path))
    by_size = {
        size: query_inputs(job.manifest, dataset, size, seed=job.scenario.seed, tokenizer=tokenizer)
        for size in query_sizes(scenario)
    }
    # The fingerprint's fixed input set: the dataset's first batch, made once up front.
    first = (
        None if dataset is None else next(batches(job.manifest, dataset, ACCURACY_BATCH, tokenizer))
    )
    predictor = factory.create()
    on_step(Step("loading the model"))
    start = time.perf_counter_ns()
    predictor.open(job.manifest, path, hardware=job.hardware)
    load_ns = time.perf_counter_ns() - start
    try:
        predict = predictor.predict
        largest = by_size[max(by_size)]

        def run_query(samples: Sequence[int]) -> object:
            inputs = by_size.get(len(samples))
            if inputs is None:  # LoadGen's last, partial offline batch: a view, no copy
                inputs = {name: array[: len(samples)] for name, array in largest.items()}
            return predict(inputs)

        native = loadgen = None
        watch = MachineWatch(gpu_index=nvml_index() if job.hardware == "gpu" else None)
        before_ns = probe_ns()
        if job.scenario.driver == "loadgen":
            loadgen = run_loadgen(
                scenario,
                run_query,
                output_dir=results_dir,
                sample_count=sample_count,
                load_ns=load_ns,
                on_step=on_step,
                watch=watch,
            )
        else:
            native = run_scenario(
                scenario,
                run_query,
                sample_count=sample_count,
                load_ns=load_ns,
                on_step=on_step,
                watch=watch,
            )
        noise = NoiseProbe(before_ns=before_ns, after_ns=probe_ns())
        accuracy = None
        # A classifier is judged by its labels (an unlabelled set fails it, saying so); an
        # encoder's outputs name no class: its quality is parity with the reference
        # framework's, from the fingerprint.
        if dataset is not None and job.manifest.task not in NOT_CLASSES:
            on_step(Step("measuring accuracy"))
            accuracy = measure_accuracy(
                predict,
                job.manifest,
                dataset,
                batches(job.manifest, dataset, ACCURACY_BATCH, tokenizer),
            )
        on_step(Step("recording the output fingerprint"))
        fingerprint = _fingerprint(predict, job, dataset, first, tokenizer)
        smallest = min(by_size)
        tracing = trace(
            predictor,
            job.trace_level,
            queries=job.trace_queries,
            inputs=by_size[smallest],
            make_inputs=lambda: query_inputs(
                job.manifest, dataset, smallest, seed=job.scenario.seed, tokenizer=tokenizer
            ),
            postprocess=lambda outputs: _postprocess(job.manifest, outputs),
            on_step=on_step,
        )
        machine = JobReadings(noise=noise, peak_memory=peak_memory(mark))
        return Run(
            load_ns, native, loadgen, accuracy, fingerprint, tracing.one_query, tracing, machine
        )
    except DlscopeError:
        raise
    except Exception as exc:  # the framework's own error types
        raise PredictorError(
            f"{predictor.framework} failed running {job.manifest.ref}: {exc}"
        ) from exc
    finally:
        on_step(Step("closing the model"))
        predictor.close()


def _postprocess(manifest: ModelManifest, outputs: list[np.ndarray]) -> list[object]:
    """Outputs through the manifest's post-processing steps (probabilities, top-k)."""
    return [
        postprocess(spec.steps, output) if spec.steps else output
        for spec, output in zip(manifest.outputs, outputs, strict=False)
    ]


def _fingerprint(
    predict: Predict,
    job: RunEvaluation,
    dataset: Dataset | None,
    first: dict[str, np.ndarray] | None,
    tokenizer: Tokenizer | None,
) -> OutputFingerprint:
    """The outputs on the fixed input set: the dataset's first batch, or seeded inputs."""
    manifest = job.manifest
    if dataset is None or first is None:
        inputs = fingerprint_inputs(manifest, tokenizer)
        identity = input_identity(
            manifest, inputs, kind="synthetic", description=f"synthetic, seed {FINGERPRINT_SEED}"
        )
    else:
        inputs = first
        split = f" {dataset.split}" if dataset.split else ""
        identity = input_identity(
            manifest, inputs, kind="dataset", description=f"{dataset.ref}{split}, first batch"
        )
    return output_fingerprint(manifest, identity, predict(inputs))


def nvml_index(visible: str | None = None) -> int:
    """The NVML index of the GPU this process measures. NVML numbers GPUs physically,
    whatever ``CUDA_VISIBLE_DEVICES`` says, while CUDA uses the first GPU listed there (the one
    the worker leases): that entry where it is an index, else 0 (a GPU named by UUID is not
    mapped yet)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible
    first = first.split(",")[0].strip()
    return int(first) if first.isdigit() else 0
