"""The measurement session of a generative model: one query is one whole generation.

The same shape as ``measurement.measure`` (load, noise probe, warm-up and timed requests
between two snapshots of the machine, noise probe, fingerprint, traced passes), with a
generation in place of a forward pass: the scenario's driver times each request end to end
while the generator keeps every token's time, and the timed requests' times travel in the
measured event (``GenerationRecord``). The parity fingerprint is the greedy tokens of the
first prompt; the traced passes profile one prefill step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from services.workers.framework.generation import (
    GENERATION_WARMUP,
    SYNTHETIC_PROMPT_WORDS,
    SYNTHETIC_PROMPTS,
    Generated,
    Generator,
    generation_fingerprint,
    perplexity,
    prompts,
    record,
)
from services.workers.framework.predictors import PredictorFactory
from services.workers.framework.profiling import trace
from services.workers.framework.streams import run_streams
from services.workers.handover import Run, TracedPass, TracedQuery, TracedStep
from shared.datasets import Dataset, load_dataset
from shared.errors import DlscopeError, PredictorError
from shared.measurement import check_sample_count, run_scenario
from shared.measurement.cost import JobReadings, peak_memory, reset_peak_memory
from shared.measurement.loadgen import LoadgenResult, TokenBounds, run_loadgen_generation
from shared.measurement.noise import NoiseProbe, probe_ns
from shared.measurement.progress import OnStep, Step, ignore_steps
from shared.measurement.readings import MachineWatch
from shared.messages import (
    GenerationRecord,
    MultiStream,
    Offline,
    RunEvaluation,
    ScenarioResult,
    Server,
    SingleStream,
)
from shared.processing.text import load_tokenizer, synthetic_texts, vocabulary_size

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["generation_plan", "measure_generation", "prompt_origin", "prompt_texts"]


def prompt_texts(job: RunEvaluation, dataset: Dataset | None, tokenizer: Tokenizer) -> list[object]:
    """The texts a generative job's requests take in turn: the data set's, or seeded ones of
    the model's vocabulary."""
    if dataset is not None:
        return list(dataset.samples)
    return list(
        synthetic_texts(
            tokenizer, SYNTHETIC_PROMPTS, SYNTHETIC_PROMPT_WORDS, seed=job.scenario.seed
        )
    )


def prompt_origin(job: RunEvaluation, dataset: Dataset | None) -> tuple[str, str]:
    """Where the parity fingerprint's first prompt came from: a description and its kind."""
    if dataset is not None:
        return f"{dataset.ref} sample {dataset.indices[0]}", "dataset"
    return f"synthetic prompt, seed {job.scenario.seed}", "synthetic"


def _check_vocabulary(job: RunEvaluation, tokens: int) -> None:
    """Refuse a tokenizer that makes ids the model has no scores for (another model's)."""
    spec = job.manifest.generation
    assert spec is not None
    logits = next(o for o in job.manifest.outputs if o.name == spec.logits)
    scores = logits.shape[-1]
    if scores != -1 and tokens > scores:
        raise PredictorError(
            f"{job.manifest.ref}: its tokenizer has {tokens} tokens but output "
            f"{logits.name!r} scores {scores}: the tokenizer is not this model's"
        )


GenerationPlan = SingleStream | Server | Offline | MultiStream


def generation_plan(job: RunEvaluation, *, served: bool = False) -> GenerationPlan:
    """The scenario a generative job runs, in-process or ``served``: single-stream (with its
    concurrency) or server, one prompt a query; in-process also offline (every prompt at
    once, generated in batches of ``batch_size`` one after another) and multi-stream (a query
    of ``samples_per_query`` prompts generated together, the next when it completes), a batch
    above 1 where the graph takes an attention mask; with warm-up windows of generations;
    through dlscope's driver, or (in-process, one stream) LoadGen's."""
    plan = job.scenario.measurement()
    scenario = job.scenario
    batched = isinstance(plan, Offline | MultiStream)
    if not (isinstance(plan, SingleStream | Server) or (batched and not served)):
        runs = (
            "single-stream and server"
            if served
            else "single-stream, server, offline and multi-stream"
        )
        raise PredictorError(
            f"{job.manifest.ref} generates text: it runs the {runs} scenarios "
            f"(asked: {scenario.name})"
        )
    assert isinstance(plan, SingleStream | Server | Offline | MultiStream)
    spec = job.manifest.generation
    assert spec is not None
    rows = plan.batch_size if isinstance(plan, Offline) else plan.samples_per_query
    if rows > 1 and spec.attention_mask is None:
        raise PredictorError(
            f"{job.manifest.ref} takes one sequence a call: its generation names no "
            f"attention_mask, so its prompts cannot share a batch (asked: {scenario.name}, "
            f"{rows} prompts a query); run it with one"
        )
    if batched and scenario.driver == "loadgen":
        raise PredictorError(
            f"an {scenario.name} generation runs on dlscope's driver; LoadGen's runs "
            "single-stream and server generations"
        )
    if scenario.driver == "loadgen" and served:
        raise PredictorError(
            f"{job.manifest.ref} is served: its requests run on dlscope's driver, whose open "
            "loop records the client's own lag; LoadGen's driver runs in-process models"
        )
    if scenario.driver == "loadgen" and scenario.concurrency > 1:
        raise PredictorError(
            f"LoadGen's driver runs one generation at a time (asked: concurrency "
            f"{scenario.concurrency}); concurrent streams run on dlscope's driver"
        )
    window = min(plan.warmup.window_queries, GENERATION_WARMUP)
    return plan.model_copy(
        update={"warmup": plan.warmup.model_copy(update={"window_queries": window})}
    )


def _scheduled(
    timed: Sequence[Generated], latencies_ns: Sequence[int], *, server: bool
) -> list[int] | None:
    """When each timed request was scheduled. Single-stream issues each when it is scheduled
    (None: the issue times). The server driver stamps each query's latency from its scheduled
    arrival to its completion; the completion follows the last token by the driver's own few
    microseconds, so the arrival is the last token's time less that latency, early by those
    microseconds at most (TTFT and E2E from it are long by as much, never short)."""
    if not server:
        return None
    return [g.token_ns[-1] - latency for g, latency in zip(timed, latencies_ns, strict=True)]


def _timed_by_loadgen(
    job: RunEvaluation,
    plan: SingleStream | Server,
    generator: Generator,
    asked: list[np.ndarray],
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch,
    results_dir: Path,
) -> tuple[LoadgenResult, GenerationRecord]:
    """The scenario under LoadGen, which times each generation's first token and end itself
    and judges them; dlscope keeps every token's time of the same requests beside it, from
    the moment LoadGen issued each."""
    generate = generator.generate
    generated: list[Generated] = []
    issued: list[int] = []

    def run(index: int, issued_ns: int, first_token: Callable[[], None]) -> int:
        done = generate(asked[index], first_token)
        generated.append(done)
        issued.append(issued_ns)
        return len(done.tokens)

    scenario = job.scenario
    result = run_loadgen_generation(
        plan,
        run,
        output_dir=results_dir,
        bounds=TokenBounds(scenario.ttft_bound_ms, scenario.tpot_bound_ms, scenario.slo_percentile),
        sample_count=len(asked),
        load_ns=load_ns,
        on_step=on_step,
        watch=watch,
    )
    # The cold query and the warm-up came first: LoadGen's own queries are the last ones.
    calls = result.phases[0].framework_calls or 0
    first = len(generated) - calls
    timed, scheduled = generated[first:], issued[first:]
    return result, record(
        timed,
        scheduled_ns=scheduled,
        duration_ns=max(g.token_ns[-1] for g in timed) - min(scheduled),
        max_new_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
    )


def _timed(
    job: RunEvaluation,
    plan: GenerationPlan,
    generator: Generator,
    asked: list[np.ndarray],
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch,
) -> tuple[ScenarioResult, GenerationRecord]:
    """The scenario's run and its timed requests' tokens: one stream through dlscope's
    drivers, or several (``concurrency``) through ``streams``."""
    generate = generator.generate
    scenario = job.scenario
    if scenario.concurrency > 1:
        assert isinstance(plan, SingleStream)
        native, timed, _ = run_streams(
            plan,
            scenario.concurrency,
            lambda i: generate(asked[i]),
            len(asked),
            load_ns=load_ns,
            on_step=on_step,
            watch=watch,
        )
        scheduled = None  # a stream issues each request when it is free: no queue
    else:
        generated: list[Generated] = []
        keep, keep_all = generated.append, generated.extend
        together = generator.generate_batch

        def run_query(samples: Sequence[int]) -> object:
            if len(samples) == 1:
                keep(generate(asked[samples[0]]))
            else:  # an offline batch or a multi-stream query: its prompts in one call a step
                keep_all(together([asked[i] for i in samples]))
            return None

        native = run_scenario(
            plan, run_query, sample_count=len(asked), load_ns=load_ns, on_step=on_step, watch=watch
        )
        # The driver called run_query for the cold query, the warm-up, then the timed ones:
        # the last of the generations are the timed requests, in order.
        phase = native.phases[0]
        timed = generated[-len(phase.latencies_ns) * phase.samples_per_query :]
        if isinstance(plan, Offline):
            # Offline issues every request at once: each is scheduled at the phase's start
            # (the first batch's issue, a clock read after it), as MLPerf's offline scenario
            # has it; its headline is the tokens per second.
            scheduled = [timed[0].issued_ns] * len(timed)
        else:
            scheduled = _scheduled(
                timed, native.phases[0].latencies_ns, server=isinstance(plan, Server)
            )
    return native, record(
        timed,
        scheduled_ns=scheduled,
        duration_ns=native.phases[0].duration_ns,
        max_new_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
    )


def _generation_pass(generator: Generator, prompt: np.ndarray, queries: int) -> TracedPass:
    """The model level of a generation: ``queries`` generations from ``prompt``, each with
    its prefill and every decode step as a step on the wall clock. The times are the
    generator's own clock reads, one per token as in every generation, so the pass costs
    nothing a timed request does not."""
    traced = []
    for index in range(queries):
        wall = time.time_ns() - time.perf_counter_ns()
        done = generator.generate(prompt)
        ends = [wall + t for t in done.token_ns]
        starts = [wall + done.issued_ns, *ends[:-1]]
        steps = tuple(
            TracedStep("prefill" if k == 0 else "decode", start, end)
            for k, (start, end) in enumerate(zip(starts, ends, strict=True))
        )
        traced.append(TracedQuery(index, starts[0], ends[-1], steps=steps))
    return TracedPass("model", "dlscope's generation loop", tuple(traced))


def measure_generation(
    factory: PredictorFactory,
    job: RunEvaluation,
    path: Path,
    *,
    on_step: OnStep = ignore_steps,
    tokenizer_path: Path | None,
    results_dir: Path,
) -> Run:
    """Load the model, generate from the prompts as the scenario issues them, record every
    token's time, then the parity fingerprint and the traced passes. LoadGen's driver
    writes its logs to ``results_dir``."""
    mark = reset_peak_memory()
    on_step(Step("preparing the prompts"))
    plan = generation_plan(job)
    if tokenizer_path is None:
        raise PredictorError(f"{job.manifest.ref} generates text and has no tokenizer")
    tokenizer = load_tokenizer(str(tokenizer_path))
    _check_vocabulary(job, vocabulary_size(tokenizer))
    dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
    texts = prompt_texts(job, dataset, tokenizer)
    check_sample_count(plan, len(texts))
    asked = prompts(job.manifest, texts, tokenizer)
    predictor = factory.create()
    scenario = job.scenario
    generator = Generator(
        job.manifest,
        predictor.predict,
        scenario.max_new_tokens,
        scenario.ignore_eos,
        temperature=scenario.temperature,
        top_k=scenario.top_k,
        seed=scenario.seed,
    )
    for prompt in asked:
        generator.check_prompt(prompt[0])
    on_step(Step("loading the model"))
    start = time.perf_counter_ns()
    predictor.open(job.manifest, path, hardware=job.hardware)
    load_ns = time.perf_counter_ns() - start
    try:
        watch = MachineWatch(gpu_index=None)
        before_ns = probe_ns()
        native = loadgen = None
        if scenario.driver == "loadgen":
            assert isinstance(plan, SingleStream | Server)
            loadgen, generation = _timed_by_loadgen(
                job, plan, generator, asked, load_ns, on_step, watch, results_dir
            )
        else:
            native, generation = _timed(job, plan, generator, asked, load_ns, on_step, watch)
        noise = NoiseProbe(before_ns=before_ns, after_ns=probe_ns())
        scored = None
        if dataset is not None:
            on_step(Step("scoring perplexity on the data set"))
            # The texts as they are, without a chat template: perplexity scores the model on
            # the corpus, not on prompts.
            texts = [tokenizer.encode(str(text)).ids for text in dataset.samples]
            scored = perplexity(
                generator,
                [np.asarray([ids], dtype=np.int64) for ids in texts],
                dataset=dataset.ref,
                split=dataset.split,
            )
        on_step(Step("recording the greedy tokens (parity)"))
        fingerprint = generation_fingerprint(generator, asked[0], *prompt_origin(job, dataset))
        prefill = generator.prefill(asked[0])
        tracing = trace(
            predictor,
            job.trace_level,
            queries=job.trace_queries,
            inputs=prefill,
            make_inputs=lambda: dict(prefill),
            postprocess=lambda outputs: list(outputs),
            on_step=on_step,
            model_pass=lambda queries: _generation_pass(generator, asked[0], queries),
        )
        machine = JobReadings(noise=noise, peak_memory=peak_memory(mark))
        return Run(
            load_ns,
            native,
            loadgen,
            None,
            fingerprint,
            tracing.one_query,
            tracing,
            machine,
            generation=generation,
            perplexity=scored,
        )
    except DlscopeError:
        raise
    except Exception as exc:  # the framework's own error types
        raise PredictorError(
            f"{predictor.framework} failed generating with {job.manifest.ref}: {exc}"
        ) from exc
    finally:
        on_step(Step("closing the model"))
        predictor.close()
