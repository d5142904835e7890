"""How an evaluation drives its model: the scenario, as it travels in requests and jobs.

One flat set of fields, the same in the HTTP body, the AMQP message and on the CLI
(``--scenario server --qps 200`` is ``{"name": "server", "target_qps": 200}``), as MLPerf
LoadGen's TestSettings are one flat struct. Its own fields carry every bound the drivers'
typed scenarios (shared.messages.plans) hold, so validating a request refuses an impossible
scenario (a server at 0 QPS, a latency bound of 0) before any work, and ``measurement()``, an
explicit call made once by whoever runs or checks the plan, turns it into the typed scenario.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, StrictInt, model_validator

from shared.inputs import MAX_SEED, REQUESTED
from shared.messages import plans
from shared.messages.lengths import TokenLengths
from shared.messages.replay import Replay

__all__ = ["DRIVERS", "SCENARIOS", "Driver", "Scenario", "ScenarioName"]

ScenarioName = Literal["single-stream", "multi-stream", "server", "offline", "batch-sweep"]
Driver = Literal["native", "loadgen"]
SCENARIOS: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline", "batch-sweep")
DRIVERS: tuple[str, ...] = ("native", "loadgen")
# A server's highest arrival rate (plans.Server's bound).
_MAX_QPS = 10_000_000
# The most tokens one generated request may ask for: above any context here, below what a
# typo would make (a length in characters, say).
_MAX_NEW_TOKENS = 32_768


class Scenario(BaseModel):
    """The scenario and its settings; fields that do not apply to it are ignored.

    - single-stream: one query at a time, the next when the previous completes; p90.
      ``batch_size`` > 1 makes each query a batch (a one-size batch sweep).
    - multi-stream: queries of ``samples_per_query`` samples, one at a time; p99.
    - server: Poisson arrivals at ``target_qps`` (seeded); VALID only if p99 latency stays
      within ``latency_bound_ms`` over ``min_duration_s`` and ``iterations`` queries.
    - offline: every sample at once, in batches of ``batch_size``; samples/s.
    - batch-sweep: single-stream at each of ``batch_sizes``; latency and samples/s per size.
    """

    model_config = REQUESTED

    name: ScenarioName = "single-stream"
    driver: Driver = Field(
        default="native",
        description="native: dlscope's drivers; loadgen: MLCommons LoadGen, which writes "
        "mlperf_log_summary.txt and mlperf_log_detail.txt next to the result",
    )
    # The numbers are strict: JSON's true, false or "5" is refused, not read as 1, 0 or 5.
    iterations: int = Field(
        strict=True,
        default=1024,
        ge=1,
        le=100_000_000,
        description="at least this many timed queries (offline: samples)",
    )
    min_duration_s: float = Field(
        strict=True, default=1.0, ge=0, description="timed phase lasts at least"
    )
    max_duration_s: float = Field(
        strict=True,
        default=60.0,
        gt=0,
        description="the timed phase stops here, minimums met or not",
    )
    warmup: int = Field(
        strict=True,
        default=32,
        ge=0,
        le=100_000,
        description="queries per warm-up window; warm-up runs until two windows' medians "
        "agree (steady state); 0: no warm-up",
    )
    batch_size: int = Field(
        strict=True, default=1, ge=1, le=65_536, description="samples per query"
    )
    samples_per_query: int = Field(
        strict=True, default=8, ge=1, le=65_536, description="multi-stream"
    )
    target_qps: float = Field(strict=True, default=500.0, description="server: mean arrival rate")
    latency_bound_ms: float = Field(
        strict=True,
        default=10.0,
        description="server: the p99 bound of a query's latency; a generation is judged by "
        "its token bounds instead (ttft_bound_ms, tpot_bound_ms, e2e_bound_ms), never by this",
    )
    batch_sizes: tuple[Annotated[StrictInt, Field(le=65_536)], ...] = Field(
        default=(1, 2, 4, 8, 16, 32), min_length=1, max_length=64, description="batch-sweep"
    )
    seed: int = Field(
        strict=True,
        default=0,
        ge=0,
        le=MAX_SEED,
        description="seeds the inputs, sample order, arrivals",
    )
    adaptive_half_width: float | None = Field(
        strict=True,
        default=None,
        gt=0,
        lt=1,
        description="single- and multi-stream: past the minimums, keep measuring until the "
        "headline's 95% interval is at most this fraction of it wide (each side), or "
        "max_duration_s",
    )

    # A generative model's query is a whole generation: prefill, then decode steps.
    max_new_tokens: int = Field(
        strict=True,
        default=32,
        ge=1,
        le=_MAX_NEW_TOKENS,
        description="text generation: the most tokens one request generates (with "
        "output_tokens, each request's own length is drawn instead)",
    )
    # A workload as the field's load tools define one: each request row's prompt and output
    # lengths drawn from distributions, seeded by seed, and recorded here, so it replays.
    input_tokens: TokenLengths | None = Field(
        default=None,
        description="text generation without a data set: synthetic prompts, each of a length "
        "in the tokenizer's tokens drawn from this (512 of them, requests take them in "
        "turn); None: 32 prompts of 64 words",
    )
    output_tokens: TokenLengths | None = Field(
        default=None,
        description="text generation: each prompt's output length drawn from this, seeded "
        "(pinned with ignore_eos, at most with it off); None: max_new_tokens for every one",
    )
    replay: Replay | None = Field(
        default=None,
        description="text generation, server scenario: replay this trace (each request's "
        "arrival, prompt length and output length) instead of Poisson arrivals and drawn "
        "lengths; the run is the trace's requests",
    )
    ignore_eos: bool = Field(
        strict=True,
        default=True,
        description="text generation: true pins every output at max_new_tokens (the end of "
        "sequence is not a stop), so requests are comparable; false stops at it (natural)",
    )

    temperature: float = Field(
        strict=True,
        default=0.0,
        ge=0,
        le=10,
        description="text generation: 0 decodes greedily; above, each token is sampled from "
        "the softmax of the scores divided by it, seeded by seed and the request's number",
    )
    top_k: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        le=1_000_000,
        description="text generation, sampling: draw from the k best-scored tokens only",
    )
    ttft_bound_ms: float | None = Field(
        strict=True,
        default=None,
        gt=0,
        description="text generation: the p99 time to first token the run must meet "
        "(MLPerf's LLM server rule); a generation is judged by the token bounds given and by "
        "no latency bound it was not given (latency_bound_ms is an image model's)",
    )
    tpot_bound_ms: float | None = Field(
        strict=True,
        default=None,
        gt=0,
        description="text generation: the p99 time per output token the run must meet",
    )
    e2e_bound_ms: float | None = Field(
        strict=True,
        default=None,
        gt=0,
        description="text generation: the p99 end-to-end time (scheduled time to the last "
        "token) the run must meet",
    )

    slo_percentile: float = Field(
        strict=True,
        default=0.99,
        ge=0.5,
        le=0.999,
        description="text generation: the percentile of TTFT and TPOT the bounds judge (MLPerf: "
        "0.99); a percentile needs enough requests to be an estimate rather than a bound",
    )
    concurrency: int = Field(
        strict=True,
        default=1,
        ge=1,
        le=4096,
        description="text generation, single-stream: this many streams, each issuing its next "
        "request when its previous one completes (a model in the worker's process: at most "
        "256, a thread each)",
    )

    @model_validator(mode="after")
    def _runnable(self) -> Self:
        # The bounds of the scenario named (a field that does not apply to it is not
        # judged); each field's own bounds are on the field. Together they are every check
        # the typed scenarios make, so ``measurement()`` of a valid Scenario cannot fail
        # (tests/unit/test_messages.py tries each field's edges on every scenario).
        problem = self._unrunnable()
        if problem is not None:
            raise ValueError(f"{self.name} scenario: {problem}")
        return self

    def _unrunnable(self) -> str | None:
        if self.min_duration_s > self.max_duration_s:
            return (
                f"min_duration_s ({self.min_duration_s}) exceeds "
                f"max_duration_s ({self.max_duration_s})"
            )
        if self.name == "server":
            if not 0 < self.target_qps <= _MAX_QPS:
                return f"target_qps: Input should be greater than 0 and at most {_MAX_QPS}"
            if self.latency_bound_ms <= 0:
                return "latency_bound_ms: Input should be greater than 0"
        if self.name == "batch-sweep":
            if any(size < 1 for size in self.batch_sizes):
                return f"batch sizes must be >= 1, got {list(self.batch_sizes)}"
            if len(set(self.batch_sizes)) != len(self.batch_sizes):
                return f"batch sizes repeat: {list(self.batch_sizes)}"
        if (problem := self._unworkable()) is not None:
            return problem
        if self.top_k is not None and self.temperature == 0:
            return "top_k: it applies when sampling: give a temperature above 0"
        if self.concurrency != 1 and self.name != "single-stream":
            return f"concurrency: {self.concurrency} streams apply to single-stream only"
        if self.adaptive_half_width is not None and not self.stops_adaptively:
            # Accepting it and measuring a fixed count would change the headline unannounced.
            return self._no_adaptive_stop
        return None

    def _unworkable(self) -> str | None:
        """What is wrong with the workload's lengths or its replayed trace."""
        if self.output_tokens is not None and self.output_tokens.longest > _MAX_NEW_TOKENS:
            return (
                f"output_tokens: at most {_MAX_NEW_TOKENS} tokens a request, and "
                f"{self.output_tokens} asks up to {self.output_tokens.longest}"
            )
        replay = self.replay
        if replay is None:
            return None
        if self.name != "server":
            return "replay: a trace sets when requests arrive: it runs in the server scenario"
        if self.driver != "native":
            return "replay: LoadGen draws its own arrivals; a trace replays on the native driver"
        if self.input_tokens is not None or self.output_tokens is not None:
            return (
                "replay: the trace gives each request's prompt and output lengths: leave "
                "input_tokens and output_tokens out"
            )
        if replay.longest_output > _MAX_NEW_TOKENS:
            return (
                f"replay: at most {_MAX_NEW_TOKENS} output tokens a request, and the trace "
                f"asks up to {replay.longest_output}"
            )
        return None

    @property
    def longest_output(self) -> int:
        """The most tokens any one request may generate: what a context must leave room
        for."""
        if self.replay is not None:
            return self.replay.longest_output
        return self.max_new_tokens if self.output_tokens is None else self.output_tokens.longest

    @property
    def stops_adaptively(self) -> bool:
        """Whether adaptive_half_width can be honoured: dlscope's drivers, single-stream at
        one sample a query, and multi-stream. A batched single-stream runs as a one-size
        batch sweep; LoadGen has its own early stopping."""
        return self.driver == "native" and (
            self.name == "multi-stream" or (self.name == "single-stream" and self.batch_size == 1)
        )

    @property
    def _no_adaptive_stop(self) -> str:
        if self.driver == "loadgen":
            return (
                "adaptive_half_width is dlscope's own stop; LoadGen applies its own early "
                "stopping, so leave adaptive_half_width out with driver loadgen"
            )
        if self.name == "single-stream":
            return (
                f"adaptive_half_width cannot be honoured at batch_size {self.batch_size}: a "
                "batched single-stream is measured as a one-size batch sweep, which stops at "
                "its minimums; use batch_size 1 or leave adaptive_half_width out"
            )
        return (
            f"adaptive_half_width applies to single-stream (batch_size 1) and multi-stream "
            f"only; {self.name} stops at its minimums"
        )

    def measurement(self) -> plans.ScenarioPlan:
        """The typed scenario the drivers run."""
        warmup = (
            plans.WarmupSettings(max_windows=0)
            if self.warmup == 0
            else plans.WarmupSettings(window_queries=self.warmup)
        )
        timed = {
            "seed": self.seed,
            "min_duration_s": self.min_duration_s,
            "max_duration_s": self.max_duration_s,
            "warmup": warmup,
        }
        adaptive = (
            None
            if self.adaptive_half_width is None
            else plans.AdaptiveStop(relative_half_width=self.adaptive_half_width)
        )
        if self.name == "single-stream" and self.batch_size == 1:
            return plans.SingleStream(min_query_count=self.iterations, adaptive=adaptive, **timed)
        if self.name == "single-stream":
            return plans.BatchSweep(
                batch_sizes=(self.batch_size,), min_query_count=self.iterations, **timed
            )
        if self.name == "multi-stream":
            return plans.MultiStream(
                samples_per_query=self.samples_per_query,
                min_query_count=self.iterations,
                adaptive=adaptive,
                **timed,
            )
        if self.name == "server" and self.replay is not None:
            # The trace is the run: its requests at its times, whatever the minimums say.
            return plans.Server(
                target_qps=min(self.replay.rate, _MAX_QPS),
                latency_bound_ms=self.latency_bound_ms,
                min_query_count=self.replay.count,
                arrivals="replay",
                **{**timed, "min_duration_s": 0.0},
            )
        if self.name == "server":
            return plans.Server(
                target_qps=self.target_qps,
                latency_bound_ms=self.latency_bound_ms,
                min_query_count=self.iterations,
                **timed,
            )
        if self.name == "offline":
            return plans.Offline(
                batch_size=self.batch_size, min_sample_count=self.iterations, **timed
            )
        return plans.BatchSweep(
            batch_sizes=self.batch_sizes, min_query_count=self.iterations, **timed
        )
