"""The generation session: one query is one whole generation, whatever generates it.

The same shape as the inference session (load, noise probe, warm-up and timed requests
between two snapshots of the machine, noise probe, fingerprint, traced passes), with a
generation in place of a forward pass, through the generation port
(``ports.GenerationBackend``): the model in this process or a server's. The scenario's load
shape issues each request and times it end to end while the backend keeps every token's (or
chunk's) time, and the timed requests' times travel in the measured event
(``GenerationRecord``), with what the backend attaches (a server's record). The parity
fingerprint is the greedy tokens of the first prompt.

Load shapes (``shared.measurement``): LoadGen's driver (in process, one stream); several
concurrent streams, closed loops of threads (``streams``); a served model's requests in one
event loop (``paced``: one stream or several as closed loops, the server scenario as an open
loop, since its requests are independent in flight); otherwise dlscope's scenario drivers,
whose offline and multi-stream queries generate their prompts together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from services.workers.framework.ports import Generated, GenerationBackend, Paced, Prompts
from services.workers.framework.sessions.measuring import opened
from services.workers.framework.sessions.prompts import load_prompts, prompt_origin
from services.workers.framework.sessions.tokens import (
    FINGERPRINT_TOKENS,
    bounded_record,
    tokens_fingerprint,
)
from services.workers.handover import JobInputs, Run
from shared.datasets import Dataset, load_dataset
from shared.errors import PredictorError
from shared.measurement import run_scenario
from shared.measurement.cost import JobReadings, peak_memory, reset_peak_memory
from shared.measurement.loadgen import LoadgenResult, TokenBounds, run_loadgen_generation
from shared.measurement.noise import NoiseProbe, probe_ns
from shared.measurement.paced import MAX_STREAMS, closed_loops, open_loop
from shared.measurement.progress import OnStep, Step, ignore_steps
from shared.measurement.readings import MachineWatch
from shared.measurement.streams import run_streams
from shared.messages import (
    MultiStream,
    Offline,
    OutputFingerprint,
    RunEvaluation,
    ScenarioResult,
    Server,
    SingleStream,
)
from shared.processing.text import load_tokenizer

__all__ = ["GENERATION_WARMUP", "GenerationPlan", "GenerationSession", "generation_plan"]

# A generation is hundreds of framework calls: warm-up windows of two requests each reach a
# steady state as surely as 32 single calls do, in a fraction of the time.
GENERATION_WARMUP = 2

GenerationPlan = SingleStream | Server | Offline | MultiStream
# The most streams of a model in this process: a thread each.
MAX_THREAD_STREAMS = 256
# The most closed-loop delays a record keeps (GenerationRecord.client_delay_ns's bound).
_MAX_DELAYS = 100_000


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
    if scenario.replay is not None and not served:
        raise PredictorError(
            f"{job.manifest.ref} runs in the worker's process: a trace replays against a "
            "served model (framework endpoint), whose requests are independent in flight"
        )
    if not served and scenario.concurrency > MAX_THREAD_STREAMS:
        raise PredictorError(
            f"{job.manifest.ref} runs in the worker's process, a thread a stream: at most "
            f"{MAX_THREAD_STREAMS} streams (asked: {scenario.concurrency}); a served model "
            f"takes up to {MAX_STREAMS}"
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


@dataclass
class _Timed:
    """What a load shape measured: the driver's result, the timed requests in completion
    order and when each was scheduled (None: when it was issued), the failed ones, each
    timed request's lag (the open loop's) or the client's delay before it (closed loops'),
    and how the requests were offered (None: by a scenario driver)."""

    native: ScenarioResult | None
    loadgen: LoadgenResult | None
    requests: list[Generated]
    scheduled_ns: list[int] | None
    duration_ns: int
    failed: list[Generated] = field(default_factory=list)
    lags_ns: list[int] = field(default_factory=list)
    load: Literal["closed", "open"] | None = None
    streams: int | None = None
    delays_ns: list[int] = field(default_factory=list)


def _closed(
    native: ScenarioResult, timed: list[Generated], failed: list[Generated], streams: int
) -> _Timed:
    """What closed loops measured. A stream issues each request when it is free: no queue,
    no scheduled times."""
    phase = native.phases[0]
    return _Timed(
        native,
        None,
        timed,
        None,
        phase.duration_ns,
        failed,
        load="closed",
        streams=streams,
        delays_ns=list(phase.issue_delays_ns),
    )


@dataclass
class GenerationSession:
    """Measure a generative model through ``backend``: generate from the prompts as the
    scenario issues them, record every token's time, then the parity fingerprint and the
    traced passes. LoadGen's driver writes its logs to the job's results folder."""

    backend: GenerationBackend
    on_step: OnStep = ignore_steps

    def measure(self, job: RunEvaluation, inputs: JobInputs) -> Run:
        mark = reset_peak_memory()
        backend, on_step = self.backend, self.on_step
        on_step(Step("preparing the prompts"))
        plan = generation_plan(job, served=backend.served)
        if inputs.tokenizer is None:
            raise PredictorError(f"{job.manifest.ref} generates text and has no tokenizer")
        tokenizer = load_tokenizer(str(inputs.tokenizer))
        dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
        prompts = load_prompts(job, plan, dataset, tokenizer)
        backend.prepare(job, prompts, inputs)
        with opened(backend, job, inputs, on_step, doing="generating with") as load_ns:
            # A server that stops mid-run leaves its parity tokens, and what the timed
            # requests measured, to report; in process, the first request is the cold one.
            parity = self._parity(job, dataset, prompts) if backend.served else None
            watch = backend.watch()
            before_ns = probe_ns()
            timed = self._timed(job, plan, prompts, inputs, load_ns, watch)
            noise = NoiseProbe(before_ns=before_ns, after_ns=probe_ns())
            recorded, lags = bounded_record(
                timed.requests,
                timed.lags_ns,
                scheduled_ns=timed.scheduled_ns,
                duration_ns=timed.duration_ns,
                # The most any request asked for: each one's own where they were drawn.
                max_new_tokens=max(prompts.output_tokens or [job.scenario.max_new_tokens]),
                ignore_eos=job.scenario.ignore_eos,
                seed=job.scenario.seed,
            )
            shape = {
                "load": timed.load,
                "streams": timed.streams,
                "client_delay_ns": timed.delays_ns[-_MAX_DELAYS:],
            }
            generation = backend.attach(recorded.model_copy(update=shape), timed.failed, lags)
            scored = None if dataset is None else backend.perplexity(dataset, on_step)
            fingerprint = parity or self._parity(job, dataset, prompts)
            tracing = backend.tracing(job, prompts.ids[0], on_step)
        return Run(
            load_ns,
            timed.native,
            timed.loadgen,
            None,
            fingerprint,
            tracing.one_query,
            tracing,
            JobReadings(noise=noise, peak_memory=peak_memory(mark)),
            generation=generation,
            perplexity=scored,
        )

    def _parity(
        self, job: RunEvaluation, dataset: Dataset | None, prompts: Prompts
    ) -> OutputFingerprint:
        self.on_step(Step("recording the greedy tokens (parity)"))
        tokens = self.backend.greedy(0, FINGERPRINT_TOKENS)
        return tokens_fingerprint(prompts.ids[0], tokens, *prompt_origin(job, dataset))

    def _timed(
        self,
        job: RunEvaluation,
        plan: GenerationPlan,
        prompts: Prompts,
        inputs: JobInputs,
        load_ns: int,
        watch: MachineWatch,
    ) -> _Timed:
        """The timed requests, through the load shape the scenario and the backend ask for
        (the module's docstring)."""
        backend, count = self.backend, len(prompts.ids)
        concurrency = job.scenario.concurrency
        if job.scenario.driver == "loadgen":
            assert isinstance(plan, SingleStream | Server)
            return self._by_loadgen(job, plan, count, inputs, load_ns, watch)
        if isinstance(backend, Paced):
            return self._paced(job, backend, plan, count, load_ns, watch)
        if concurrency > 1:
            assert isinstance(plan, SingleStream)
            native, timed, failed = run_streams(
                plan,
                concurrency,
                backend.generate,
                count,
                load_ns=load_ns,
                on_step=self.on_step,
                watch=watch,
            )
            return _closed(native, timed, failed, concurrency)
        return self._by_drivers(plan, count, load_ns, watch)

    def _paced(
        self,
        job: RunEvaluation,
        backend: Paced,
        plan: GenerationPlan,
        count: int,
        load_ns: int,
        watch: MachineWatch,
    ) -> _Timed:
        """A served model's requests, in one event loop: the server scenario as an open loop,
        one stream or several as closed loops (``shared.measurement.paced``)."""
        on_step = self.on_step
        if isinstance(plan, Server):
            replay = job.scenario.replay
            arrivals = None if replay is None else replay.offsets_ns()
            native, timed, failed, lags = backend.paced(
                lambda generate: open_loop(
                    plan,
                    generate,
                    count,
                    load_ns=load_ns,
                    on_step=on_step,
                    watch=watch,
                    arrivals_ns=arrivals,
                )
            )
            scheduled = [g.issued_ns - lag for g, lag in zip(timed, lags, strict=True)]
            duration = native.phases[0].duration_ns
            return _Timed(native, None, timed, scheduled, duration, failed, lags, load="open")
        assert isinstance(plan, SingleStream)
        concurrency = job.scenario.concurrency
        native, timed, failed = backend.paced(
            lambda generate: closed_loops(
                plan, concurrency, generate, count, load_ns=load_ns, on_step=on_step, watch=watch
            )
        )
        return _closed(native, timed, failed, concurrency)

    def _by_drivers(
        self, plan: GenerationPlan, count: int, load_ns: int, watch: MachineWatch
    ) -> _Timed:
        """One request a query through dlscope's scenario drivers (several prompts together
        for an offline batch or a multi-stream query)."""
        generated: list[Generated] = []
        keep, keep_all = generated.append, generated.extend
        generate, together = self.backend.generate, self.backend.generate_together

        def run_query(samples: Sequence[int]) -> object:
            if len(samples) == 1:
                keep(generate(samples[0]))
            else:  # an offline batch or a multi-stream query: its prompts in one call a step
                keep_all(together(samples))
            return None

        native = run_scenario(
            plan, run_query, sample_count=count, load_ns=load_ns, on_step=self.on_step, watch=watch
        )
        # The driver called run_query for the cold query, the warm-up, then the timed ones:
        # the last of the generations are the timed requests, in order.
        phase = native.phases[0]
        timed = generated[-len(phase.latencies_ns) * phase.samples_per_query :]
        if isinstance(plan, Offline):
            # Offline issues every request at once: each is scheduled at the phase's start
            # (the first batch's issue, a clock read after it), as MLPerf's offline scenario
            # has it; its headline is the tokens per second.
            scheduled: list[int] | None = [timed[0].issued_ns] * len(timed)
        elif isinstance(plan, Server):
            # The server driver stamps each query's latency from its scheduled arrival to its
            # completion; the completion follows the last token by the driver's own few
            # microseconds, so the arrival is the last token's time less that latency, early
            # by those microseconds at most (TTFT and E2E from it are long by as much, never
            # short).
            scheduled = [
                g.ended_ns - latency for g, latency in zip(timed, phase.latencies_ns, strict=True)
            ]
        else:  # single-stream issues each when it is scheduled
            scheduled = None
        return _Timed(native, None, timed, scheduled, phase.duration_ns)

    def _by_loadgen(
        self,
        job: RunEvaluation,
        plan: SingleStream | Server,
        count: int,
        inputs: JobInputs,
        load_ns: int,
        watch: MachineWatch,
    ) -> _Timed:
        """The scenario under LoadGen, which times each generation's first token and end
        itself and judges them; dlscope keeps every token's time of the same requests beside
        it, from the moment LoadGen issued each."""
        generate = self.backend.generate
        generated: list[Generated] = []
        issued: list[int] = []

        def run(index: int, issued_ns: int, first_token: Callable[[], None]) -> int:
            done = generate(index, first_token)
            generated.append(done)
            issued.append(issued_ns)
            return len(done.tokens)

        scenario = job.scenario
        result = run_loadgen_generation(
            plan,
            run,
            output_dir=inputs.results_dir,
            bounds=TokenBounds(
                scenario.ttft_bound_ms, scenario.tpot_bound_ms, scenario.slo_percentile
            ),
            sample_count=count,
            load_ns=load_ns,
            on_step=self.on_step,
            watch=watch,
        )
        # The cold query and the warm-up came first: LoadGen's own queries are the last ones.
        calls = result.phases[0].framework_calls or 0
        first = len(generated) - calls
        timed, scheduled = generated[first:], issued[first:]
        duration = max(g.ended_ns for g in timed) - min(scheduled)
        return _Timed(None, result, timed, scheduled, duration)
