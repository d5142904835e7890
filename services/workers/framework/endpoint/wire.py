"""The OpenAI streaming API as both clients speak it (``client``, blocking, for the checks
and the parity tokens; ``load``, asynchronous, for the timed requests): what a request asks
(``Sampling``), the body it posts, how each server-sent event of the answer is read, and one
request as it went (``Streamed``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "API",
    "FAILURES",
    "Failure",
    "Reading",
    "Sampling",
    "Streamed",
    "content",
    "event",
    "request_body",
]

API = Literal["chat", "completions"]
# How a request can fail, each counted apart beside the latencies; ``truncated`` is judged on
# an answer read to its end (``shared.measurement.finish``), the others as it is read.
FAILURES = (
    "http_error",
    "timeout",
    "refused",
    "disconnected",
    "malformed",
    "server_error",
    "truncated",
)
Failure = Literal[
    "http_error", "timeout", "refused", "disconnected", "malformed", "server_error", "truncated"
]

# The bias that keeps a token out of a sampled or greedy output (OpenAI's bound).
_EXCLUDED = -100


@dataclass(frozen=True)
class Sampling:
    """What a request asks of the server's generation."""

    max_tokens: int
    # Pinned length: the end-of-sequence tokens are kept out (``logit_bias``), and servers
    # that know it get ``ignore_eos`` too (vLLM does).
    ignore_eos: bool = True
    temperature: float = 0.0
    top_k: int | None = None
    seed: int | None = None
    eos_token_ids: Sequence[int] = ()


@dataclass(frozen=True)
class Streamed:
    """One request as it went: when it was issued and when each chunk with content came
    (``time.perf_counter_ns``), the text, and how it ended (``completed_ns``: when the
    answer's end was read, its ``[DONE]`` or the failure)."""

    issued_ns: int
    chunk_ns: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    # The server's own counts, where it sent them (not every server streams ``usage``).
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    failure: Failure | None = None
    cause: str | None = None
    completed_ns: int | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    # A request as the load shapes take it (``shared.measurement.requests.Request``).
    @property
    def ended_ns(self) -> int:
        return self.chunk_ns[-1] if self.chunk_ns else self.issued_ns

    @property
    def finished_ns(self) -> int:
        return self.completed_ns if self.completed_ns is not None else self.ended_ns


@dataclass
class Reading:
    """One request's answer as it arrives."""

    issued_ns: int
    on_chunk: Callable[[int], None] | None
    chunk_ns: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    finish: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)

    def chunk(self, text: str) -> None:
        self.chunk_ns.append(time.perf_counter_ns())
        self.pieces.append(text)
        if self.on_chunk is not None:
            self.on_chunk(len(self.chunk_ns))

    def took(self, api: API, data: Mapping[str, Any]) -> str | None:
        """Take one event of the answer; the server's error, where it sent one."""
        if "error" in data:
            return str(data["error"])[:512]
        self.usage = data.get("usage") or self.usage
        text, reason = content(api, data)
        if text:
            self.chunk(text)
        self.finish = reason or self.finish
        return None

    def ended(self, failure: Failure | None = None, cause: str | None = None) -> Streamed:
        return Streamed(
            issued_ns=self.issued_ns,
            chunk_ns=self.chunk_ns,
            text="".join(self.pieces),
            finish_reason=self.finish,
            prompt_tokens=_count(self.usage.get("prompt_tokens")),
            completion_tokens=_count(self.usage.get("completion_tokens")),
            failure=failure,
            cause=cause,
            completed_ns=time.perf_counter_ns(),
        )

    def line(self, api: API, line: str | bytes) -> Streamed | None:
        """Take one line of the answer's event stream; the request as it went once the line
        ends it (``[DONE]``, the server's error), else None. A ``ValueError`` or
        ``TypeError`` for data the API does not describe."""
        data = event(line)
        if data is False:
            return None
        if data is None:
            return self.ended()
        if (error := self.took(api, data)) is not None:
            return self.ended("server_error", error)
        return None

    def read_to_its_end(self) -> Streamed:
        """The answer once its stream closed without ``[DONE]``: fine once the server said
        why it finished; otherwise it went away mid-answer."""
        if self.finish is None:
            return self.ended("disconnected", "the stream ended before the answer did")
        return self.ended()


def request_body(
    model: str, api: API, prompt: str, sampling: Sampling
) -> tuple[str, dict[str, Any]]:
    """The path and JSON body a streamed request for ``prompt`` posts: a user message for
    ``chat``, the text to continue for ``completions``."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "stream": True,
        # Servers that stream their token counts put them in a last chunk (vLLM does).
        "stream_options": {"include_usage": True},
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.top_k is not None:
        body["top_k"] = sampling.top_k
    if sampling.ignore_eos:
        body["ignore_eos"] = True
        # Not min_tokens as well: llama-cpp-python 0.3.36 ends some answers at once when
        # it is given (an empty text, "stop"); the bias below pins the length everywhere.
        if sampling.eos_token_ids:
            body["logit_bias"] = {str(t): _EXCLUDED for t in sampling.eos_token_ids}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/chat/completions", body
    body["prompt"] = prompt
    return "/completions", body


def event(line: str | bytes) -> dict[str, Any] | Literal[False] | None:
    """One line of a server-sent event stream: the JSON of a ``data:`` line, None for
    ``[DONE]``, False for a line that carries no data (blank separators, comments, event
    names). A ``ValueError`` for data the API does not describe."""
    if isinstance(line, bytes):
        if not line.startswith(b"data:"):
            return False
        data: str | bytes = line[5:].strip()
        done = data == b"[DONE]"
    else:
        if not line.startswith("data:"):
            return False
        data = line[5:].strip()
        done = data == "[DONE]"
    if done:
        return None
    parsed = orjson.loads(data)
    if not isinstance(parsed, dict):
        raise ValueError(f"a chunk that is a {type(parsed).__name__}, not an object")
    return parsed


def content(api: API, data: Mapping[str, Any]) -> tuple[str, str | None]:
    """An event's text and finish reason (none in the usage chunk)."""
    choices = data.get("choices") or []
    if not choices:
        return "", None  # the usage chunk
    choice = choices[0]
    if api == "chat":
        text = (choice.get("delta") or {}).get("content") or ""
    else:
        text = choice.get("text") or ""
    if not isinstance(text, str):
        raise TypeError(f"content is a {type(text).__name__}, not text")
    return text, choice.get("finish_reason")


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None
