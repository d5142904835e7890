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

from shared.messages.statistics import LatencyStatistics

__all__ = [
    "GENERATION_METRICS",
    "GeneratedRequest",
    "GenerationRecord",
    "GenerationSummary",
    "Perplexity",
]

# Each metric's definition, as reports show it beside the number.
GENERATION_METRICS: dict[str, str] = {
    "ttft": "time to first token: first token's time - the request's scheduled time",
    "tpot": "time per output token: (E2E - TTFT) / (output tokens - 1), per request",
    "itl": "inter-token latency: every gap between two consecutive tokens, pooled",
    "e2e": "end to end: the last token's time - the request's scheduled time",
    "output_tokens_per_s": "output tokens of the timed requests / the timed phase's duration",
    "requests_per_s": "timed requests / the timed phase's duration",
    "goodput_per_s": "timed requests whose own TTFT and TPOT met every bound / the duration",
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

    @property
    def output_tokens(self) -> int:
        return len(self.token_ns)


class GenerationRecord(BaseModel):
    """Every timed request of a generative evaluation, with what it asked for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_new_tokens: int = Field(ge=1)
    ignore_eos: bool
    duration_ns: int = Field(gt=0, description="the timed phase's duration")
    requests: list[GeneratedRequest] = Field(min_length=1)


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
        description="requests that met every TTFT and TPOT bound, per second (with bounds)",
    )
    definitions: dict[str, str] = Field(default_factory=lambda: dict(GENERATION_METRICS))
