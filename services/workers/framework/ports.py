"""The ports the measurement sessions drive, each with its adapters below it.

- ``Predictor``: one framework in this process, the only framework-specific code in a
  worker (adapters in ``predictors``). Pre/post-processing, batching, timing and tracing live
  outside predictors, so every framework is measured by the same code. A predictor whose
  framework has a profiler also offers it (``Profiles``): the session runs it in passes of its
  own, after the timed one.
- ``GenerationBackend``: request i -> its timed tokens, whatever generates them: the model in
  this process (``generator.InProcessBackend``, over a ``Predictor``) or a server's, over
  HTTP (``endpoint.EndpointBackend``). The generation session measures either the same way.
  Its requests are blocking calls made from the load shapes' threads; an adapter whose
  requests are coroutines (a server's) is also ``Paced``: it runs the asynchronous load
  shapes (``shared.measurement.paced``) in an event loop of its own, thousands of requests
  in flight from one thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from shared.manifests import ModelManifest
from shared.measurement.progress import OnStep, Step
from shared.messages import LayerTiming, Perplexity, ProfiledLevel, RunEvaluation

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from services.workers.handover import JobInputs, Tracing
    from shared.datasets import Dataset
    from shared.measurement.readings import MachineWatch
    from shared.messages import GenerationRecord

__all__ = [
    "Generated",
    "GenerationBackend",
    "LayerProfiler",
    "Paced",
    "Predictor",
    "Profiles",
    "Prompts",
    "Unavailable",
]


class Predictor(Protocol):
    framework: str

    def open(self, manifest: ModelManifest, model_path: Path, *, hardware: str) -> None:
        """Load the model; raises ``PredictorError`` with the framework's reason."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one batch; the hot path: no work beyond the framework call."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Framework version and the device the model runs on."""


@dataclass(frozen=True)
class Unavailable:
    """A trace level a predictor cannot serve here, and why (CUPTI without a GPU, say): the
    evaluation reports it and goes on; it is never an error."""

    reason: str


class LayerProfiler(Protocol):
    """One profiled pass's profiler: started, fed queries, stopped; then the layers it saw."""

    source: str  # the profiler, as a user knows it: "onnxruntime session profiling"

    def start(self) -> None:
        """Switch the profiler on (it may open a profiling session of its own)."""

    def predict(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One query, profiled."""

    def stop(self) -> list[LayerTiming]:
        """Switch it off; every layer it recorded since ``start``, on the wall clock (ns
        since the epoch), in the order they ran. Called once, after ``start``, even when a
        query failed."""


@runtime_checkable
class Profiles(Protocol):
    """A predictor whose framework reports its layers through its own profiler."""

    def profiler(self, level: ProfiledLevel) -> LayerProfiler | Unavailable:
        """A profiler for ``level`` on the open model, or why there is none here."""
        ...


@dataclass(frozen=True)
class Generated:
    """One generation's tokens and their times (``time.perf_counter_ns``).

    A served model's request times chunks, not tokens: ``tokens`` are its text's tokens by
    the model's tokenizer, ``token_ns`` the chunks' arrivals, ``reported_*`` the server's own
    counts, ``finish_reason`` the server's word on why it ended; and it may fail
    (``failure``, a kind of ``endpoint.FAILURES``, with its ``cause``), when it is no latency
    sample. ``completed_ns``: when the answer's end was read (a served request's ``[DONE]``);
    None: at its last token."""

    issued_ns: int
    prompt_tokens: int
    tokens: list[int]
    token_ns: list[int]
    stopped_by: str
    failure: str | None = None
    cause: str | None = None
    reported_tokens: int | None = None
    reported_input_tokens: int | None = None
    chunks: bool = False
    finish_reason: str | None = None
    completed_ns: int | None = None

    @property
    def ended_ns(self) -> int:
        """When its last token (or chunk) came: what the load shapes time it to."""
        return self.token_ns[-1]

    @property
    def finished_ns(self) -> int:
        """When the request was done with, failed or not: from here on, a closed loop's
        stream waits on its client only."""
        if self.completed_ns is not None:
            return self.completed_ns
        return self.token_ns[-1] if self.token_ns else self.issued_ns


@dataclass(frozen=True)
class Prompts:
    """What a generative job's requests take in turn: each text, the token ids the model's
    ``input_ids`` steps make of it ([1, n] each), the tokenizer that made them, and each
    one's output length where the scenario draws them (``output_tokens``; None: every
    request generates up to ``max_new_tokens``)."""

    texts: Sequence[object]
    ids: Sequence[np.ndarray]
    tokenizer: Tokenizer
    output_tokens: Sequence[int] | None = None

    def output_length(self, index: int, max_new_tokens: int) -> int:
        """How many tokens request ``index`` asks for."""
        return max_new_tokens if self.output_tokens is None else self.output_tokens[index]


class GenerationBackend(Protocol):
    """Request i -> its timed tokens (see the module's docstring)."""

    @property
    def served(self) -> bool:
        """The model runs in a server: its requests are independent in flight, so one stream
        and the server scenario issue them as closed and open loops of requests rather than
        through a scenario driver's queue in front of one model; its parity tokens are asked
        first, so a server that stops mid-run leaves them."""
        ...

    @property
    def opening(self) -> Step:
        """The step before the timed open, as the evaluation's progress shows it."""
        ...

    @property
    def closing(self) -> Step | None: ...

    @property
    def name(self) -> str:
        """Who failed, in an error: "onnxruntime", "the endpoint"."""
        ...

    def prepare(self, job: RunEvaluation, prompts: Prompts, inputs: JobInputs) -> None:
        """Everything before the timed open: checks, sampling, the texts to send."""

    def open(self, job: RunEvaluation, inputs: JobInputs) -> None:
        """Load the model, or check the server serves it: the time it takes is the load."""

    def close(self) -> None: ...

    def generate(self, index: int, first_token: Callable[[], None] | None = None) -> Generated:
        """Request ``index`` (of the prompts, in turn) as the scenario asks for it;
        ``first_token`` is called as its first token is out. Safe from several threads."""

    def generate_together(self, indices: Sequence[int]) -> list[Generated]:
        """Several prompts in one call a step (offline and multi-stream batches)."""

    def greedy(self, index: int, tokens: int) -> list[int]:
        """``tokens`` greedy tokens of prompt ``index``, end of sequence ignored (parity)."""

    def watch(self) -> MachineWatch:
        """What the timed window watches: the machine, and the server's process if local."""

    def attach(
        self, record: GenerationRecord, failed: list[Generated], lags_ns: list[int]
    ) -> GenerationRecord:
        """The timed requests' record, with what this backend adds to it (a server's record:
        the failed requests by kind, the client's lag, the server's metrics)."""

    def perplexity(self, dataset: Dataset, on_step: OnStep) -> Perplexity | None:
        """The model's perplexity on the data set's texts, where this backend can score it."""

    def tracing(self, job: RunEvaluation, prompt: np.ndarray, on_step: OnStep) -> Tracing:
        """The traced passes the job's trace level asks for, on ``prompt``."""


T = TypeVar("T")


@runtime_checkable
class Paced(Protocol):
    """A generation backend whose requests are coroutines."""

    def paced(self, shape: Callable[[Callable[[int], Awaitable[Generated]]], Awaitable[T]]) -> T:
        """Run ``shape`` (given ``generate(i)``, request i as a coroutine) to its end in an
        event loop of the backend's own; its result."""
        ...
