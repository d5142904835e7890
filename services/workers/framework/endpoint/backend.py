"""The generation port's adapter for a served model: each request sent to the worker's
OpenAI-compatible server over HTTP and timed chunk by chunk (``client``).

The server serves a model under the name of its manifest (``smollm2``), or the one its
manifest says it is served as (``served_as``, a served model's), whose tokenizer
counts the tokens on both sides and whose steps make the prompts: the same token ids an
in-process run of the manifest generates from, sent as their text through the completions
API, or, for a chat-formatted model, the text as a user message through the chat API (the
server applies its own template).

A request's times are its chunks' (``client.Streamed``): the record says so (``timed:
chunk``), keeps the tokenizer's and the server's counts, the requests that failed by kind
(never latency samples: ``truncated`` among them, an answer that ended before the length
the run pinned, ``shared.measurement.finish``), the client's lag, and the server's
``/metrics`` before and after the timed requests.

Every request carries the W3C ``traceparent`` of the worker's span for the job, so a server
that exports OpenTelemetry spans (vLLM's ``--otlp-traces-endpoint``) puts its spans in the
evaluation's trace; what runs in the server is the server's to trace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import psutil
import uvloop

from services.workers.framework.endpoint.client import API, Endpoint
from services.workers.framework.endpoint.load import LoadClient, Prepared
from services.workers.framework.endpoint.server import (
    connect,
    load_client,
    local_server,
    process_name,
    public_url,
)
from services.workers.framework.endpoint.wire import Sampling, Streamed
from services.workers.framework.ports import Generated, Prompts
from services.workers.handover import EndpointOptions, JobInputs, Tracing
from shared.datasets import Dataset
from shared.errors import PredictorError
from shared.inputs import shorten
from shared.manifests import ChatTemplateStep
from shared.measurement.finish import TRUNCATED, truncation
from shared.measurement.paced import MAX_IN_FLIGHT
from shared.measurement.progress import OnStep, Step
from shared.measurement.readings import MachineWatch
from shared.messages import (
    GenerationRecord,
    LevelOutcome,
    Perplexity,
    RunEvaluation,
    ServedRun,
    SingleStream,
)
from shared.messages.tracing import includes, profiled_levels

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["EndpointBackend"]

T = TypeVar("T")

_NOT_TRACED = (
    "a served model runs in its server: dlscope sends the trace context with every request, "
    "and the server's own spans join the trace where it exports them"
)


@dataclass
class EndpointBackend:
    """Requests sent to the server ``options`` names."""

    options: EndpointOptions
    served = True
    closing = None
    name = "the endpoint"
    _endpoint: Endpoint | None = field(default=None, init=False)
    _load: LoadClient | None = field(default=None, init=False)
    _prepared: list[Prepared] = field(default_factory=list, init=False)
    _tokenizer: Tokenizer | None = field(default=None, init=False)
    _asked: Sequence[np.ndarray] = field(default=(), init=False)
    _sent: list[str] = field(default_factory=list, init=False)
    _sampling: Sampling = field(default=Sampling(max_tokens=1), init=False)
    # Each prompt's own, where the scenario draws output lengths; else every one _sampling.
    _samplings: list[Sampling] = field(default_factory=list, init=False)
    _headers: dict[str, str] = field(default_factory=dict, init=False)
    _eos: Sequence[int] = field(default=(), init=False)
    _before: tuple[dict[str, float] | None, str | None] = field(default=(None, None), init=False)
    _server: psutil.Process | None = field(default=None, init=False)

    @property
    def opening(self) -> Step:
        return Step("asking the server", public_url(self.options.url or ""))

    @property
    def endpoint(self) -> Endpoint:
        assert self._endpoint is not None, "prepared before it is asked"
        return self._endpoint

    def prepare(self, job: RunEvaluation, prompts: Prompts, inputs: JobInputs) -> None:
        scenario = job.scenario
        spec = job.manifest.generation
        assert spec is not None
        api = _api(job)
        tokenizer = prompts.tokenizer
        self._tokenizer, self._asked, self._eos = tokenizer, prompts.ids, spec.eos_token_ids
        self._sent = [
            str(text)
            if api == "chat"
            else tokenizer.decode(ids[0].tolist(), skip_special_tokens=False)
            for text, ids in zip(prompts.texts, prompts.ids, strict=True)
        ]
        self._sampling = Sampling(
            max_tokens=scenario.max_new_tokens,
            ignore_eos=scenario.ignore_eos,
            temperature=scenario.temperature,
            top_k=scenario.top_k,
            seed=scenario.seed if scenario.temperature > 0 else None,
            eos_token_ids=spec.eos_token_ids,
        )
        lengths = prompts.output_tokens
        self._samplings = (
            [self._sampling] * len(self._sent)
            if lengths is None
            else [dataclasses.replace(self._sampling, max_tokens=n) for n in lengths]
        )
        self._headers = {"traceparent": inputs.traceparent} if inputs.traceparent else {}
        one_stream = isinstance(scenario.measurement(), SingleStream)
        streams = scenario.concurrency if one_stream else MAX_IN_FLIGHT
        # The checks, the metrics and the parity tokens go one at a time; the timed requests
        # through the load client, in one event loop (``paced``), each body made here.
        served = job.manifest.served_name
        longest = scenario.max_duration_s
        self._endpoint = connect(self.options, served, api=api, longest_phase_s=longest)
        self._load = load_client(
            self.options, served, api=api, streams=streams, longest_phase_s=longest
        )
        self._prepared = [
            self._load.prepare(text, sampling)
            for text, sampling in zip(self._sent, self._samplings, strict=True)
        ]

    def open(self, job: RunEvaluation, inputs: JobInputs) -> None:
        try:
            self.endpoint.check()  # ConfigurationError: the evaluation fails at once, naming why
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()

    def generate(self, index: int, first_token: Callable[[], None] | None = None) -> Generated:
        return self._generate(index, self._samplings[index], first_token)

    def _generate(
        self, index: int, sampling: Sampling, first_token: Callable[[], None] | None = None
    ) -> Generated:
        on_chunk = None if first_token is None else _once(first_token)
        streamed = self.endpoint.stream(
            self._sent[index], sampling, headers=self._headers, on_chunk=on_chunk
        )
        return self._generated(index, streamed, sampling)

    def paced(self, shape: Callable[[Callable[[int], Awaitable[Generated]]], Awaitable[T]]) -> T:
        """``shape`` (a load shape of ``shared.measurement.paced``) run over the load client,
        in an event loop of its own."""
        load = self._load
        assert load is not None, "prepared before it is paced"
        prepared, headers, samplings = self._prepared, self._headers, self._samplings

        async def run() -> T:
            async with load as client:

                async def generate(index: int) -> Generated:
                    streamed = await client.stream(prepared[index], headers=headers)
                    return self._generated(index, streamed, samplings[index])

                return await shape(generate)

        return _in_own_loop(run())

    def _generated(self, index: int, streamed: Streamed, sampling: Sampling) -> Generated:
        """A request as the generation port gives it: its text's tokens counted, and judged
        truncated where it ended before the length the run pinned."""
        assert self._tokenizer is not None
        tokens = self._tokenizer.encode(streamed.text, add_special_tokens=False).ids
        failure: str | None = streamed.failure
        cause = streamed.cause
        if failure is None and not streamed.chunk_ns:  # no time to first token: no sample
            failure, cause = "malformed", "an answer without content"
        if failure is None:  # read to its end: did it end where the run pinned its length?
            cause = truncation(
                pinned=sampling.ignore_eos,
                max_new_tokens=sampling.max_tokens,
                finish_reason=streamed.finish_reason,
                reported_tokens=streamed.completion_tokens,
                counted_tokens=len(tokens),
            )
            failure = None if cause is None else TRUNCATED
        return Generated(
            streamed.issued_ns,
            int(self._asked[index].shape[1]),
            tokens,
            streamed.chunk_ns,
            "eos" if streamed.finish_reason == "stop" else "max_new_tokens",
            failure=failure,
            cause=cause,
            reported_tokens=streamed.completion_tokens,
            reported_input_tokens=streamed.prompt_tokens,
            chunks=True,
            finish_reason=streamed.finish_reason,
            completed_ns=streamed.completed_ns,
        )

    def generate_together(self, indices: Sequence[int]) -> list[Generated]:
        raise PredictorError("a served model's requests go one at a time, each in flight")

    def greedy(self, index: int, tokens: int) -> list[int]:
        pinned = Sampling(tokens, ignore_eos=True, eos_token_ids=self._eos)
        greedy = self._generate(index, pinned)
        if greedy.failure is not None:
            raise PredictorError(f"the first request failed ({greedy.failure}): {greedy.cause}")
        return greedy.tokens

    def watch(self) -> MachineWatch:
        self._before = self.endpoint.metrics()
        self._server = local_server(self.endpoint.url)
        server = self._server
        return MachineWatch(gpu_index=None, measured=() if server is None else (server,))

    def attach(
        self, record: GenerationRecord, failed: list[Generated], lags_ns: list[int]
    ) -> GenerationRecord:
        endpoint, server = self.endpoint, self._server
        after, _ = endpoint.metrics()
        before, note = self._before
        failures, causes = _failures(failed)
        served = ServedRun(
            url=endpoint.shown,
            model=endpoint.model,
            api=endpoint.api,
            failures=failures,
            failure_causes=causes,
            client_lag_ns=lags_ns,
            metrics_before=before,
            metrics_after=after,
            metrics_note=None if note is None else shorten(note, 512),
            server_process=None if server is None else f"pid {server.pid} ({process_name(server)})",
        )
        return record.model_copy(update={"timed": "chunk", "served": served})

    def perplexity(self, dataset: Dataset, on_step: OnStep) -> Perplexity | None:
        return None  # the server's scores are not ours to read

    def tracing(self, job: RunEvaluation, prompt: np.ndarray, on_step: OnStep) -> Tracing:
        """The services' spans are traced as for any job; what runs in the server is the
        server's to trace (the trace context goes with every request)."""
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


def _api(job: RunEvaluation) -> API:
    """Chat for a chat-formatted model (its prompts go through its chat template), else the
    completions API on the very text the model's tokens make."""
    spec = job.manifest.generation
    assert spec is not None
    ids = next(s for s in job.manifest.inputs if s.name == spec.input_ids)
    return (
        "chat" if any(isinstance(step, ChatTemplateStep) for step in ids.steps) else "completions"
    )


def _in_own_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` in a uvloop event loop: on this thread, or on one of its own where this
    thread runs a loop already (an embedded run's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return uvloop.run(main)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dlscope-load") as pool:
        return pool.submit(uvloop.run, main).result()


def _once(first_token: Callable[[], None]) -> Callable[[int], None]:
    def on_chunk(count: int) -> None:
        if count == 1:
            first_token()

    return on_chunk


def _failures(failed: list[Generated]) -> tuple[dict[str, int], list[str]]:
    """The failed requests per kind, and the first cause of each kind."""
    failures = Counter(str(g.failure) for g in failed)
    causes = {str(g.failure): f"{g.failure}: {(g.cause or '')[:400]}" for g in reversed(failed)}
    return dict(failures), [causes[kind] for kind in failures]
