"""What a generative model's evaluation measured, per request and token, and what it sums up to.

A generative query is a whole generation: the prompt's prefill, then one decode step per
token. The worker records, per timed request, when it was scheduled and issued and when each
output token came (one array per request, carried in the one measured event), with the token
counts from the model's own tokenizer. The metrics, each with the definition shown beside it
(MLPerf's where it defines one):

    TTFT   time to first token: first token's time - scheduled time
    TPOT   time per output token, per request: (E2E - TTFT) / (output tokens - 1)
    ITL    inter-token latency: every gap between consecutive tokens of a request, pooled
    E2E    end to end: last token's time - scheduled time

Times are measured from the scheduled time, not the issue time: a request that waited for
the previous one to finish (or for a free stream) waited as a user would, and leaving that out
is coordinated omission. In single-stream the two are the same instant.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.inputs import Reason
from shared.messages.statistics import LatencyStatistics

__all__ = [
    "GENERATION_METRICS",
    "SERVED_METRICS",
    "ClientLag",
    "GeneratedRequest",
    "GenerationRecord",
    "GenerationSummary",
    "Perplexity",
    "ServedRun",
    "SteadyWindow",
]

# Each metric's definition, as reports show it beside the number.
GENERATION_METRICS: dict[str, str] = {
    "ttft": "time to first token: first token's time - the request's scheduled time",
    "tpot": "time per output token: (E2E - TTFT) / (output tokens - 1), per request",
    "itl": "inter-token latency: every gap between two consecutive tokens, pooled",
    "e2e": "end to end: the last token's time - the request's scheduled time",
    "output_tokens_per_s": "output tokens of the timed requests / the timed phase's duration",
    "requests_per_s": "timed requests / the timed phase's duration",
    "goodput_per_s": "timed requests whose own TTFT, TPOT and E2E met every bound given / "
    "the duration",
}
# What changes for a served model, whose times are chunks' (one chunk may carry several
# tokens): what is measured per chunk, and what is derived from the token counts.
SERVED_METRICS: dict[str, str] = {
    **GENERATION_METRICS,
    "ttft": "time to first token: the first chunk with content's arrival - the request's "
    "scheduled time",
    "tpot": "time per output token (derived): (E2E - TTFT) / (output tokens - 1), output "
    "tokens counted on the text received by the model's tokenizer",
    "itl": "inter-chunk latency: every gap between two consecutive chunks with content, "
    "pooled (a chunk may carry several tokens)",
    "e2e": "end to end: the last chunk's arrival - the request's scheduled time",
    "output_tokens_per_s": "output tokens (the model's tokenizer on the text received) of the "
    "timed requests / the timed phase's duration",
}


class GeneratedRequest(BaseModel):
    """One timed generation. Times are ns from the timed phase's start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduled_ns: int = Field(ge=0, description="when the scenario meant to issue it")
    issued_ns: int = Field(ge=0, description="when the prompt went to the framework")
    token_ns: list[int] = Field(
        min_length=1, description="when each output token came (the first: prefill's end)"
    )
    input_tokens: int = Field(ge=1, description="the prompt's tokens, by the model's tokenizer")
    stopped_by: Literal["max_new_tokens", "eos"]
    # A served model's request (``GenerationRecord.timed == "chunk"``): ``token_ns`` holds when
    # each chunk with content came, and a chunk may carry several tokens, so the output's
    # tokens are counted on the text received by the model's tokenizer, and by the server
    # where its ``usage`` says.
    counted_tokens: int | None = Field(
        default=None, ge=1, description="output tokens by the model's tokenizer (served)"
    )
    reported_tokens: int | None = Field(
        default=None, ge=0, description="output tokens as the server's usage reports them"
    )
    reported_input_tokens: int | None = Field(
        default=None, ge=0, description="prompt tokens as the server's usage reports them"
    )
    # Optional, so events recorded before it read as they were: None there, and for a
    # request the server ended without saying why.
    finish_reason: str | None = Field(
        default=None,
        max_length=64,
        description="why the server says it ended the answer ('length', 'stop', ...; served)",
    )

    @property
    def output_tokens(self) -> int:
        return self.counted_tokens if self.counted_tokens is not None else len(self.token_ns)


class ServedRun(BaseModel):
    """What a served model's run saw of the server besides the timed requests: where it was
    (never its API key), how the requests that failed failed (never latency samples), and
    the server's own metrics before and after, where it exposes them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(max_length=2048, description="the endpoint's base URL, without credentials")
    model: str = Field(max_length=256, description="the model name the server serves it as")
    api: Literal["chat", "completions"]
    failures: dict[str, int] = Field(
        default_factory=dict, description="timed requests that failed, per kind"
    )
    failure_causes: list[Reason] = Field(
        default_factory=list, max_length=8, description="the first causes, one per kind"
    )
    client_lag_ns: list[int] = Field(
        default_factory=list,
        max_length=100_000,
        description="per timed request, its issue time - its scheduled time (the client's lag)",
    )
    metrics_before: dict[str, float] | None = Field(
        default=None, description="the server's /metrics before the timed requests"
    )
    metrics_after: dict[str, float] | None = None
    metrics_note: str | None = Field(default=None, max_length=512)
    server_process: str | None = Field(
        default=None,
        max_length=256,
        description="the process on this host serving the endpoint, whose CPU time is the "
        "measurement's own (not another process's); None: the server is elsewhere or unseen",
    )


class GenerationRecord(BaseModel):
    """Every timed request of a generative evaluation, with what it asked for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_new_tokens: int = Field(ge=1)
    ignore_eos: bool
    duration_ns: int = Field(gt=0, description="the timed phase's duration")
    requests: list[GeneratedRequest] = Field(min_length=1)
    # What each request's times are: every token's (a model run here), or every chunk's with
    # content (a served model: TTFT is the first chunk's, gaps are between chunks).
    timed: Literal["token", "chunk"] = "token"
    served: ServedRun | None = None
    # How the requests were offered, where a load shape of requests issued them (None: a
    # scenario driver's queue or batches, and events recorded before this was): closed loops
    # of ``streams`` streams, or an open loop on a schedule. Optional, so old events read.
    load: Literal["closed", "open"] | None = None
    streams: int | None = Field(default=None, ge=1, description="closed loop: its streams")
    client_delay_ns: list[int] = Field(
        default_factory=list,
        max_length=100_000,
        description="closed loop: per timed request after its stream's first, its issue - "
        "when its stream's previous request was done (the client's own delay)",
    )
    # A run too long to record every token's time: ``requests`` is a uniform sample of the
    # timed requests, and these count all of them. None: ``requests`` holds every one.
    timed_requests: int | None = Field(
        default=None, ge=1, description="every timed request, where requests is a sample"
    )
    output_tokens: int | None = Field(
        default=None, ge=0, description="every timed request's output tokens, summed"
    )

    @property
    def sampled(self) -> bool:
        """Whether ``requests`` is a sample of the timed requests, not all of them."""
        return self.timed_requests is not None and self.timed_requests > len(self.requests)

    @property
    def request_count(self) -> int:
        """Every timed request, sampled or not."""
        return self.timed_requests if self.sampled and self.timed_requests else len(self.requests)


class Perplexity(BaseModel):
    """A language model's perplexity on a data set's texts, teacher-forced: exp of the mean
    negative log-likelihood of each token given the ones before it in its text (the first
    token of a text is given, not predicted), natural logarithms, float64."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    perplexity: float = Field(gt=0)
    tokens: int = Field(ge=1, description="tokens predicted")
    texts: int = Field(ge=1)
    dataset: str = Field(description="name@version")
    split: str | None = None


class ClientLag(BaseModel):
    """How late the client itself was, over a run's timed requests: in an open loop, each
    request's issue after its scheduled time; in closed loops, each request's issue after
    its stream's previous request was done (a stream idle through the client's fault)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop: Literal["open", "closed"]
    count: int = Field(ge=1)
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_gap_ms: float | None = Field(
        default=None, description="open loop: the schedule's mean time between two arrivals"
    )
    definition: str


class ClientCost(BaseModel):
    """What a served model's client itself cost over the timed phase: the CPU time of the
    process that issued the requests and read the answers (dlscope's, not the server's),
    its share of a core, and per timed request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: float = Field(ge=0, allow_inf_nan=False)
    cores: float = Field(
        ge=0, allow_inf_nan=False, description="cpu_s over the timed phase's duration"
    )
    cpu_per_request_ms: float = Field(ge=0, allow_inf_nan=False)
    saturated: bool = Field(
        description="the client's event loop, on one thread, was busy nearly all the time: "
        "the client, not the server, was the limit"
    )


class SteadyWindow(BaseModel):
    """The part of the timed phase where the client held its full load (every stream with a
    request in flight, or arrivals on schedule past the ramp-up), ramp-up and drain left
    out, and what was measured inside it. Times are ns from the timed phase's start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_ns: int = Field(ge=0)
    end_ns: int = Field(ge=0)
    share: float = Field(ge=0, description="of the timed phase's duration")
    held: str = Field(description="what the client held in the window, in words")
    requests: int = Field(ge=0, description="timed requests wholly inside the window")
    output_tokens_per_s: float = Field(description="output tokens that came in the window / it")
    requests_per_s: float = Field(description="requests completed in the window / it")
    ttft: LatencyStatistics | None = Field(description="of the requests wholly inside")
    tpot: LatencyStatistics | None = None
    short: bool = Field(description="too short to stand for the load (a warning says so)")


class GenerationSummary(BaseModel):
    """The token-level statistics of a generative evaluation; ``definitions`` says what each
    one is. Each has the intervals and the sufficiency rule of every dlscope percentile (a
    p99 of too few values is a bound, not an estimate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int
    input_tokens_mean: float
    output_tokens_mean: float
    ttft: LatencyStatistics
    tpot: LatencyStatistics | None = Field(
        description="None when no request generated more than one token"
    )
    itl: LatencyStatistics | None = Field(description="None when there was no second token")
    e2e: LatencyStatistics
    output_tokens_per_s: float
    requests_per_s: float
    goodput_per_s: float | None = Field(
        default=None,
        description="requests that met every TTFT, TPOT and E2E bound, per second (with bounds)",
    )
    definitions: dict[str, str] = Field(default_factory=lambda: dict(GENERATION_METRICS))
    # A served model's run: what its times are, how many requests failed (per kind), how far
    # the tokenizer's counts are from the server's, how late the client issued.
    timed: Literal["token", "chunk"] = "token"
    failures: dict[str, int] = Field(default_factory=dict)
    token_count_difference: float | None = Field(
        default=None,
        description="(tokenizer's output tokens - server's) / server's, over the requests "
        "where the server reported its count",
    )
    client_lag_p99_ms: float | None = Field(
        default=None, description="p99 of issue time - scheduled time (the client's own lag)"
    )
    client_lag: ClientLag | None = Field(
        default=None, description="the client's own lag (open loop) or delay (closed loops)"
    )
    client: ClientCost | None = Field(
        default=None, description="a served model's client: its own CPU over the timed phase"
    )
    sampled_requests: int | None = Field(
        default=None,
        description="where the run was too long to record every token's time: the token "
        "statistics are of a uniform sample of this many of the timed requests (counts, "
        "rates and goodput are of all)",
    )
    steady: SteadyWindow | None = Field(
        default=None,
        description="throughput and token latencies over the steady-state window (where a "
        "load shape of requests offered them); the figures above are the whole run's",
    )
