"""The ``endpoint`` framework: a model served by an OpenAI-compatible server (vLLM, llama.cpp's
server, SGLang, TGI, …), measured over HTTP with the language-model scenarios and records.

The worker fronts one server, named by ``DLSCOPE_ENDPOINT_URL`` (its API root, e.g.
``http://127.0.0.1:8000/v1``), with the key in ``DLSCOPE_ENDPOINT_API_KEY`` when it needs one:
both from the environment the worker gives this process, the key never in an event. The
server serves a model under the name of its manifest (``smollm2``), whose tokenizer counts
the tokens on both sides and whose steps make the prompts: the same token ids an in-process
run of the manifest generates from, sent as their text through the completions API, or, for
a chat-formatted model, the text as a user message through the chat API (the server applies
its own template).

A request's times are its chunks' (``endpoint.Streamed``): the record says so (``timed:
chunk``), keeps the tokenizer's and the server's counts, the requests that failed by kind
(never latency samples), and the server's ``/metrics`` before and after. Drivers:
single-stream and N concurrent streams (closed loops, ``streams.run_streams``), and the server
scenario as an open loop (``run_open_loop``): Poisson arrivals, each request issued at its time
on a thread of its own whatever is in flight, so the server sees the offered load, and the
client's lag (issue time - scheduled time) measured for every request and judged.

Every request carries the W3C ``traceparent`` of the worker's span for the job, so a server
that exports OpenTelemetry spans (vLLM's ``--otlp-traces-endpoint``) puts its spans in the
evaluation's trace.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
import psutil

from services.workers.framework.endpoint import API, Endpoint, Sampling
from services.workers.framework.generation import (
    FINGERPRINT_TOKENS,
    Generated,
    check_context,
    prompts,
    record,
    tokens_fingerprint,
)
from services.workers.framework.generative import generation_plan, prompt_origin, prompt_texts
from services.workers.framework.streams import (
    FAILURE_STREAK,
    every_request_failed,
    run_streams,
    untimed_ns,
)
from services.workers.handover import Run, Tracing
from shared.config import Settings
from shared.datasets import Dataset, load_dataset
from shared.errors import ConfigurationError, PredictorError
from shared.manifests import ChatTemplateStep
from shared.measurement import check_sample_count
from shared.measurement.cost import JobReadings, peak_memory, reset_peak_memory
from shared.measurement.noise import NoiseProbe, probe_ns
from shared.measurement.overhead import null_query_floor_ns
from shared.measurement.progress import OnStep, Step, ignore_steps, timed_queries, warming_up
from shared.measurement.readings import MachineWatch
from shared.measurement.server import poisson_arrivals_ns
from shared.measurement.warmup import warm_up
from shared.messages import (
    HarnessOverhead,
    LevelOutcome,
    RunEvaluation,
    ScenarioResult,
    ServedRun,
    Server,
    SingleStream,
    TimedPhase,
)
from shared.messages.tracing import includes, profiled_levels
from shared.processing.text import load_tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "API_VERSION",
    "described_endpoint",
    "local_server",
    "measure_served",
    "run_open_loop",
    "unusable",
]

# What the framework's "version" is for an endpoint: the API it speaks (the server's own
# software and version are its own business; the worker's device names the server).
API_VERSION = "1"
# The most requests the open loop keeps in flight: beyond, a request waits for a thread and
# its lag says so.
MAX_IN_FLIGHT = 256
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# The first arrival comes this long after the schedule is fixed (threads to start).
_LEAD_NS = 5_000_000
# A request goes to its thread this long before its arrival, and the thread waits, its last
# _SPIN_NS awake.
_HANDOVER_NS = 2_000_000
_SPIN_NS = 200_000
_NOT_TRACED = (
    "a served model runs in its server: dlscope sends the trace context with every request, "
    "and the server's own spans join the trace where it exports them"
)


def unusable(hardware: str) -> str | None:
    """Why this worker can measure nothing: no endpoint named."""
    if not Settings().endpoint_url:
        return (
            "no endpoint to measure: start the worker with --endpoint URL (an OpenAI-compatible "
            "API root, e.g. http://127.0.0.1:8000/v1), or set DLSCOPE_ENDPOINT_URL"
        )
    return None


def described_endpoint(hardware: str) -> dict[str, Any]:
    """The server as the worker announces it: its URL and the models it serves now."""
    settings = Settings()
    url = settings.endpoint_url or ""
    with _endpoint(settings, "") as endpoint:
        models = endpoint.models()  # ConfigurationError: announced as the device's error
    return {"endpoint": {"url": _public(url), "models": models}}


def local_server(url: str) -> psutil.Process | None:
    """The process of this host listening on ``url``'s port when ``url`` names this host:
    the server under test, whose CPU time is the measurement's, not another process's. None
    when it is elsewhere, or when this host does not say (its sockets are not ours to see)."""
    parsed = urlsplit(url)
    if parsed.hostname not in _LOOPBACK:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        for connection in psutil.net_connections(kind="tcp"):
            listening = connection.status == psutil.CONN_LISTEN
            if listening and connection.laddr and connection.laddr.port == port and connection.pid:
                return psutil.Process(connection.pid)
    except psutil.Error:
        return None
    return None


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "gone"


def _public(url: str) -> str:
    """``url`` without any user or password in it: what events and pages may show."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


def _endpoint(
    settings: Settings, model: str, *, api: API = "completions", streams: int = 1
) -> Endpoint:
    if not settings.endpoint_url:
        raise ConfigurationError(unusable("") or "no endpoint")
    return Endpoint(
        settings.endpoint_url,
        model,
        api=api,
        api_key=settings.endpoint_api_key or os.environ.get("OPENAI_API_KEY"),
        timeout_s=settings.endpoint_timeout_s,
        connect_timeout_s=settings.endpoint_connect_timeout_s,
        max_connections=max(streams, 1),
    )


def _api(job: RunEvaluation) -> API:
    """Chat for a chat-formatted model (its prompts go through its chat template), else the
    completions API on the very text the model's tokens make."""
    spec = job.manifest.generation
    assert spec is not None
    ids = next(s for s in job.manifest.inputs if s.name == spec.input_ids)
    return (
        "chat" if any(isinstance(step, ChatTemplateStep) for step in ids.steps) else "completions"
    )


def measure_served(
    job: RunEvaluation,
    *,
    on_step: OnStep = ignore_steps,
    tokenizer_path: Path | None,
    traceparent: str | None = None,
) -> Run:
    """Measure ``job``'s model as the worker's server serves it: check the server, then the
    scenario's requests, the greedy tokens of the first prompt (parity), the server's metrics
    around the timed requests."""
    mark = reset_peak_memory()
    if job.manifest.generation is None:
        raise PredictorError(
            f"{job.manifest.ref} is not a generative model: an endpoint measures text "
            "generation (a manifest with generation: and a tokenizer)"
        )
    if tokenizer_path is None:
        raise PredictorError(f"{job.manifest.ref} has no tokenizer to count tokens with")
    on_step(Step("preparing the prompts"))
    plan = generation_plan(job, served=True)
    assert isinstance(plan, SingleStream | Server), "offline and multi-stream are refused"
    scenario = job.scenario
    tokenizer = load_tokenizer(str(tokenizer_path))
    dataset, asked, sent, api = _prompts(job, plan, tokenizer)
    spec = job.manifest.generation
    sampling = Sampling(
        max_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
        temperature=scenario.temperature,
        top_k=scenario.top_k,
        seed=scenario.seed if scenario.temperature > 0 else None,
        eos_token_ids=spec.eos_token_ids,
    )
    headers = {"traceparent": traceparent} if traceparent else {}
    settings = Settings()
    on_step(Step("asking the server", f"{_public(settings.endpoint_url or '')}"))
    streams = scenario.concurrency if isinstance(plan, SingleStream) else MAX_IN_FLIGHT
    with _endpoint(settings, job.manifest.name, api=api, streams=streams) as endpoint:
        start = time.perf_counter_ns()
        endpoint.check()  # ConfigurationError: the evaluation fails at once, naming why
        load_ns = time.perf_counter_ns() - start

        def generate(i: int, how: Sampling = sampling) -> Generated:
            streamed = endpoint.stream(sent[i], how, headers=headers)
            tokens = tokenizer.encode(streamed.text, add_special_tokens=False).ids
            failure, cause = streamed.failure, streamed.cause
            if failure is None and not streamed.chunk_ns:  # no time to first token: no sample
                failure, cause = "malformed", "an answer without content"
            return Generated(
                streamed.issued_ns,
                int(asked[i].shape[1]),
                tokens,
                streamed.chunk_ns,
                "eos" if streamed.finish_reason == "stop" else "max_new_tokens",
                failure=failure,
                cause=cause,
                reported_tokens=streamed.completion_tokens,
                reported_input_tokens=streamed.prompt_tokens,
                chunks=True,
            )

        # The parity tokens first: a server that stops mid-run leaves them, and what the
        # timed requests measured, to report.
        on_step(Step("recording the greedy tokens (parity)"))
        greedy = generate(
            0, Sampling(FINGERPRINT_TOKENS, ignore_eos=True, eos_token_ids=spec.eos_token_ids)
        )
        if greedy.failure is not None:
            raise PredictorError(f"the first request failed ({greedy.failure}): {greedy.cause}")
        before, note = endpoint.metrics()
        server = local_server(endpoint.url)
        watch = MachineWatch(gpu_index=None, measured=() if server is None else (server,))
        before_ns = probe_ns()
        if isinstance(plan, Server):
            native, timed, failed, lags = run_open_loop(
                plan, generate, len(asked), load_ns=load_ns, on_step=on_step, watch=watch
            )
            scheduled: list[int] | None = [
                g.issued_ns - lag for g, lag in zip(timed, lags, strict=True)
            ]
        else:
            native, timed, failed = run_streams(
                plan,
                scenario.concurrency,
                generate,
                len(asked),
                load_ns=load_ns,
                on_step=on_step,
                watch=watch,
            )
            lags, scheduled = [], None
        noise = NoiseProbe(before_ns=before_ns, after_ns=probe_ns())
        after, _ = endpoint.metrics()
    generation = record(
        timed,
        scheduled_ns=scheduled,
        duration_ns=native.phases[0].duration_ns,
        max_new_tokens=scenario.max_new_tokens,
        ignore_eos=scenario.ignore_eos,
    )
    failures, causes = _failures(failed)
    served = ServedRun(
        url=_public(endpoint.url),
        model=endpoint.model,
        api=api,
        failures=failures,
        failure_causes=causes,
        client_lag_ns=lags,
        metrics_before=before,
        metrics_after=after,
        metrics_note=note,
        server_process=None if server is None else f"pid {server.pid} ({_name(server)})",
    )
    return Run(
        load_ns,
        native,
        None,
        None,
        tokens_fingerprint(asked[0], greedy.tokens, *prompt_origin(job, dataset)),
        None,
        _tracing(job),
        JobReadings(noise=noise, peak_memory=peak_memory(mark)),
        generation=generation.model_copy(update={"timed": "chunk", "served": served}),
    )


def _prompts(
    job: RunEvaluation, plan: SingleStream | Server, tokenizer: Tokenizer
) -> tuple[Dataset | None, list[np.ndarray], list[str], API]:
    """The data set (if any), each prompt's token ids as the model's steps make them, what is
    sent for each, and the API it is sent through."""
    scenario = job.scenario
    dataset = None if job.dataset is None else load_dataset(job.dataset, job.split)
    texts = prompt_texts(job, dataset, tokenizer)
    check_sample_count(plan, len(texts))
    asked = prompts(job.manifest, texts, tokenizer)
    for ids in asked:
        check_context(job.manifest, ids.shape[1], scenario.max_new_tokens)
    api = _api(job)
    sent = [
        str(text) if api == "chat" else tokenizer.decode(ids[0].tolist(), skip_special_tokens=False)
        for text, ids in zip(texts, asked, strict=True)
    ]
    return dataset, asked, sent, api


def _until(at_ns: int) -> None:
    """Sleep until ``at_ns`` (``perf_counter_ns``), the last ``_SPIN_NS`` awake: the OS wakes
    a sleeper some tens of microseconds late."""
    clock = time.perf_counter_ns
    if (left := at_ns - clock() - _SPIN_NS) > 0:
        time.sleep(left / 1e9)
    while clock() < at_ns:
        pass


def _failures(failed: list[Generated]) -> tuple[dict[str, int], list[str]]:
    """The failed requests per kind, and the first cause of each kind."""
    failures: dict[str, int] = {}
    causes: dict[str, str] = {}
    for g in failed:
        assert g.failure is not None
        failures[g.failure] = failures.get(g.failure, 0) + 1
        causes.setdefault(g.failure, f"{g.failure}: {(g.cause or '')[:400]}")
    return failures, list(causes.values())


def _tracing(job: RunEvaluation) -> Tracing:
    """The services' spans are traced as for any job; what runs in the server is the server's
    to trace (the trace context goes with every request)."""
    level = job.trace_level
    if level == "none":
        return Tracing(level)
    outcomes = [LevelOutcome(level="application", captured=True, source="dlscope's services")]
    if includes(level, "model"):
        outcomes += [
            LevelOutcome(level=deeper, captured=False, reason=_NOT_TRACED)
            for deeper in ("model", *profiled_levels(level))
        ]
    return Tracing(level, tuple(outcomes))


def run_open_loop(
    plan: Server,
    generate: Callable[[int], Generated],
    prompts_count: int,
    *,
    load_ns: int,
    on_step: OnStep,
    watch: MachineWatch | None,
) -> tuple[ScenarioResult, list[Generated], list[Generated], list[int]]:
    """Poisson arrivals at ``plan.target_qps``, each request issued at its time on a thread of
    its own (at most ``MAX_IN_FLIGHT`` at once); the result (latency from the scheduled time
    to the last chunk), the timed requests in completion order, those that failed, and each
    timed request's lag (its issue - its scheduled time)."""
    clock = time.perf_counter_ns
    floor_ns = null_query_floor_ns()

    def one(i: int) -> int:
        return untimed_ns(generate(i % prompts_count))

    on_step(warming_up(plan))
    first_ns = one(0)
    counter = iter(range(1, 1 << 62))
    warmup = warm_up(lambda: one(next(counter)), plan.warmup)
    arrivals = poisson_arrivals_ns(
        plan.target_qps,
        seed=plan.seed,
        min_count=plan.min_query_count,
        min_duration_ns=int(plan.min_duration_s * 1e9),
    )
    on_step(timed_queries(plan, "", min(float(arrivals[-1]) / 1e9, plan.max_duration_s)))
    end_window = watch() if watch is not None else None
    origin = clock() + _LEAD_NS
    deadline = origin + int(plan.max_duration_s * 1e9)
    lock = threading.Lock()
    done: list[tuple[Generated, int]] = []
    failed: list[Generated] = []
    streak = [0]

    def request(i: int, scheduled: int) -> None:
        _until(scheduled)
        generated = generate(i % prompts_count)
        with lock:
            if generated.failure is None:
                done.append((generated, generated.issued_ns - scheduled))
                streak[0] = 0
            else:
                failed.append(generated)
                streak[0] += 1

    issued = 0
    with ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="dlscope-request") as pool:
        for i, at in enumerate((arrivals + origin).tolist()):
            now = clock()
            if at > deadline or streak[0] >= FAILURE_STREAK:
                break
            # Handed to its thread ahead of its time, which waits for it there: the lag is
            # then that thread's own wake-up, not the issuer's and a hand-over besides.
            if at - _HANDOVER_NS > now:
                time.sleep((at - _HANDOVER_NS - now) / 1e9)
            pool.submit(request, i, at)
            issued += 1
    window = end_window() if end_window is not None else None
    if not done:
        raise every_request_failed(failed)
    done.sort(key=lambda d: d[0].token_ns[-1])
    timed = [g for g, _ in done]
    lags = [lag for _, lag in done]
    phase = TimedPhase(
        samples_per_query=1,
        first_query_ns=first_ns,
        warmup=warmup,
        latencies_ns=tuple(g.token_ns[-1] - (g.issued_ns - lag) for g, lag in done),
        duration_ns=timed[-1].token_ns[-1] - origin,
        overhead=HarnessOverhead(
            per_query_ns=float(np.mean(lags)),
            timer_floor_ns=floor_ns,
            method="the client's mean lag: a request's issue time - its scheduled arrival",
        ),
        stopped_by="schedule" if issued == len(arrivals) else "max_duration",
        issue_delays_ns=tuple(lags),
        unfinished_queries=len(arrivals) - issued,
        window=window,
    )
    result = ScenarioResult(
        scenario=plan, sample_count=prompts_count, load_ns=load_ns, phases=(phase,)
    )
    return result, timed, failed, lags
