"""The inference session: one query is one framework call on a batch of ready inputs.

load -> noise probe -> cold query, warm-up, timed queries (each timed loop between two
snapshots of the machine) -> noise probe -> accuracy (with a dataset) -> output
fingerprint -> the traced passes the job's trace level asks for (``profiling``), after the
timed queries and on the same inputs, so tracing never enters the headline

The process's peak memory is reset as the job starts and read as it ends (it outlives jobs).

Nothing here talks to the broker or to the event loop: the session runs on the child
process's main thread (``services.workers.framework.session``), alone, and hands back a ``Run``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from services.workers.framework.ports import Predictor
from services.workers.framework.profiling import trace
from services.workers.framework.sessions.accuracy import batches, measure_accuracy
from services.workers.framework.sessions.fingerprint import (
    NOT_CLASSES,
    input_identity,
    output_fingerprint,
)
from services.workers.framework.sessions.inputs import (
    FINGERPRINT_SEED,
    SYNTHETIC_SAMPLES,
    fingerprint_inputs,
    query_inputs,
    query_sizes,
)
from services.workers.framework.sessions.measuring import opened
from services.workers.handover import JobInputs, Run, Tracing
from shared.datasets import Dataset, load_dataset
from shared.manifests import ModelManifest
from shared.measurement import ScenarioPlan, check_sample_count, run_scenario
from shared.measurement.cost import JobReadings, peak_memory, reset_peak_memory
from shared.measurement.loadgen import LoadgenResult, run_loadgen
from shared.measurement.noise import NoiseProbe, probe_ns
from shared.measurement.progress import OnStep, Step, ignore_steps
from shared.measurement.readings import MachineWatch
from shared.messages import AccuracyMeasurement, OutputFingerprint, RunEvaluation, ScenarioResult
from shared.processing import postprocess
from shared.processing.text import load_tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["ACCURACY_BATCH", "InferenceSession", "nvml_index"]

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
Inputs = dict[str, np.ndarray]
# Accuracy runs the whole dataset through the model in batches of this size (a model with a
# fixed batch dimension gets its own), independent of the timed scenario's query sizes.
ACCURACY_BATCH = 32


@dataclass
class _Loaded:
    """The predictor as the session opens it (``measuring.opened``)."""

    predictor: Predictor
    opening = Step("loading the model")
    closing = Step("closing the model")

    @property
    def name(self) -> str:
        return self.predictor.framework

    def open(self, job: RunEvaluation, inputs: JobInputs) -> None:
        assert inputs.model is not None, "a model in process has weights"
        self.predictor.open(job.manifest, inputs.model, hardware=job.hardware)

    def close(self) -> None:
        self.predictor.close()


@dataclass(frozen=True)
class _Prepared:
    """What the session builds before the model loads: the queries' inputs by size, the
    data set and its first batch, the tokenizer."""

    scenario: ScenarioPlan
    dataset: Dataset | None
    sample_count: int
    tokenizer: Tokenizer | None
    by_size: dict[int, Inputs]
    first: Inputs | None


@dataclass
class InferenceSession:
    """Measure a model in this process on ``predictor``: load it, run the scenario, then
    (with a dataset) measure accuracy, then record the output fingerprint, then run the
    traced passes the job's trace level asks for.

    The queries run on inputs built before timing starts, one batch per query size the
    scenario uses: the dataset's first samples, or seeded synthetic inputs. So a latency
    is the framework call on ready inputs and nothing else."""

    predictor: Predictor
    on_step: OnStep = ignore_steps
    # The NVML index of the GPU measured (``nvml_index``), where the job's hardware is one.
    gpu_index: int = 0

    def measure(self, job: RunEvaluation, inputs: JobInputs) -> Run:
        mark = reset_peak_memory()
        on_step = self.on_step
        on_step(Step("preparing the inputs"))
        prepared = _prepare(job, inputs)
        with opened(_Loaded(self.predictor), job, inputs, on_step, doing="running") as load_ns:
            native, loadgen, noise = self._timed(job, inputs, prepared, load_ns)
            accuracy = self._accuracy(job, prepared)
            on_step(Step("recording the output fingerprint"))
            predict = self.predictor.predict
            fingerprint = _fingerprint(
                predict, job, prepared.dataset, prepared.first, prepared.tokenizer
            )
            tracing = self._tracing(job, prepared)
        machine = JobReadings(noise=noise, peak_memory=peak_memory(mark))
        return Run(
            load_ns, native, loadgen, accuracy, fingerprint, tracing.one_query, tracing, machine
        )

    def _timed(
        self, job: RunEvaluation, inputs: JobInputs, prepared: _Prepared, load_ns: int
    ) -> tuple[ScenarioResult | None, LoadgenResult | None, NoiseProbe]:
        """The scenario's timed queries, through dlscope's driver or LoadGen's, between
        two noise probes."""
        predict = self.predictor.predict
        by_size = prepared.by_size
        largest = by_size[max(by_size)]

        def run_query(samples: Sequence[int]) -> object:
            batch = by_size.get(len(samples))
            if batch is None:  # LoadGen's last, partial offline batch: a view, no copy
                batch = {name: array[: len(samples)] for name, array in largest.items()}
            return predict(batch)

        native = loadgen = None
        watch = MachineWatch(gpu_index=self.gpu_index if job.hardware == "gpu" else None)
        before_ns = probe_ns()
        if job.scenario.driver == "loadgen":
            loadgen = run_loadgen(
                prepared.scenario,
                run_query,
                output_dir=inputs.results_dir,
                sample_count=prepared.sample_count,
                load_ns=load_ns,
                on_step=self.on_step,
                watch=watch,
            )
        else:
            native = run_scenario(
                prepared.scenario,
                run_query,
                sample_count=prepared.sample_count,
                load_ns=load_ns,
                on_step=self.on_step,
                watch=watch,
            )
        return native, loadgen, NoiseProbe(before_ns=before_ns, after_ns=probe_ns())

    def _accuracy(self, job: RunEvaluation, prepared: _Prepared) -> AccuracyMeasurement | None:
        """A classifier is judged by its labels (an unlabelled set fails it, saying so); an
        encoder's outputs name no class: its quality is parity with the reference
        framework's, from the fingerprint."""
        dataset = prepared.dataset
        if dataset is None or job.manifest.task in NOT_CLASSES:
            return None
        self.on_step(Step("measuring accuracy"))
        return measure_accuracy(
            self.predictor.predict,
            job.manifest,
            dataset,
            batches(job.manifest, dataset, ACCURACY_BATCH, prepared.tokenizer),
        )

    def _tracing(self, job: RunEvaluation, prepared: _Prepared) -> Tracing:
        smallest = min(prepared.by_size)
        return trace(
            self.predictor,
            job.trace_level,
            queries=job.trace_queries,
            inputs=prepared.by_size[smallest],
            make_inputs=lambda: query_inputs(
                job.manifest,
                prepared.dataset,
                smallest,
                seed=job.scenario.seed,
                tokenizer=prepared.tokenizer,
            ),
            postprocess=lambda outputs: _postprocess(job.manifest, outputs),
            on_step=self.on_step,
        )


def _prepare(job: RunEvaluation, inputs: JobInputs) -> _Prepared:
    scenario = job.scenario.measurement()
    dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
    sample_count = len(dataset) if dataset is not None else SYNTHETIC_SAMPLES
    check_sample_count(scenario, sample_count)  # before the model is loaded
    tokenizer = None if inputs.tokenizer is None else load_tokenizer(str(inputs.tokenizer))
    by_size = {
        size: query_inputs(job.manifest, dataset, size, seed=job.scenario.seed, tokenizer=tokenizer)
        for size in query_sizes(scenario)
    }
    # The fingerprint's fixed input set: the dataset's first batch, made once up front.
    first = (
        None if dataset is None else next(batches(job.manifest, dataset, ACCURACY_BATCH, tokenizer))
    )
    return _Prepared(scenario, dataset, sample_count, tokenizer, by_size, first)


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


def nvml_index(visible: str | None) -> int:
    """The NVML index of the GPU this process measures. NVML numbers GPUs physically,
    whatever ``CUDA_VISIBLE_DEVICES`` (``visible``) says, while CUDA uses the first GPU listed
    there (the one the worker leases): that entry where it is an index, else 0 (a GPU named
    by UUID is not mapped yet)."""
    first = (visible or "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0
