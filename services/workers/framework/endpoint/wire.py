"""The OpenAI streaming API as both clients speak it (``client``, blocking, for the checks
and the parity tokens; ``load``, asynchronous, for the timed requests): what a request asks
(``Sampling``), the body it posts, how each server-sent event of the answer is read, and one
request as it went (``Streamed``).

An answer is bounded as it is read, each bound a failure kind of its own and counted as data
(issue 42): ``overlong``, a request past its time (``Limits.total_s``: the scenario's longest
phase and one chunk timeout beyond it, so one byte a second cannot hold a worker for the
framework's deadline); ``oversized``, an answer past what the tokens asked could make (its
bytes, its chunks, its text, or one line over ``MAX_LINE_BYTES``), so a server streaming
forever or one huge chunk costs a bounded amount of memory, and the text the tokenizer counts
is bounded too."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import orjson

from shared.credentials import scrubbed
from shared.inputs import MAX_NAME, cleaned

__all__ = [
    "API",
    "FAILURES",
    "HEADERS",
    "MAX_LINE_BYTES",
    "REQUEST_LIMIT_S",
    "Failure",
    "Limits",
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
Failure = Literal[
    "http_error",
    "timeout",
    "refused",
    "disconnected",
    "malformed",
    "server_error",
    "truncated",
    "oversized",
    "overlong",
]
FAILURES: tuple[Failure, ...] = get_args(Failure)

# What every request sends: JSON, and asks for the answer uncompressed, since the bounds below
# count its bytes as they come off the connection.
HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
# The most one request may take where a client is not told (``server.request_limit_s``
# derives it from the scenario): the default longest phase and chunk timeout, 60 s each.
REQUEST_LIMIT_S = 120.0

# One server-sent event line at most: a chunk of a token or a few is a few hundred bytes.
MAX_LINE_BYTES = 1024**2
# What one asked token may bring at most, beside a fixed allowance for the answer's own
# events (the role, the usage, [DONE]): generous for any server's chunk of one token (vLLM's
# is ~250 bytes), far below what a server streaming forever sends.
_BYTES_PER_TOKEN = 16 * 1024
_CHARS_PER_TOKEN = 64
_CHUNKS_PER_TOKEN = 2
_ALLOWANCE = 16

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
class Limits:
    """The most one answer may take: ``total_s`` from its send to its end, and, for
    ``max_tokens`` asked, its bytes, its chunks with content and its text."""

    max_tokens: int
    total_s: float

    @property
    def max_bytes(self) -> int:
        return _BYTES_PER_TOKEN * (self.max_tokens + _ALLOWANCE)

    @property
    def max_chunks(self) -> int:
        return _CHUNKS_PER_TOKEN * self.max_tokens + _ALLOWANCE

    @property
    def max_chars(self) -> int:
        return _CHARS_PER_TOKEN * (self.max_tokens + _ALLOWANCE)


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
    """One request's answer as it arrives, within ``limits``; ``secrets`` (the endpoint's
    password and key) are hidden in its cause, whoever quotes them."""

    issued_ns: int
    on_chunk: Callable[[int], None] | None
    limits: Limits
    secrets: tuple[str, ...] = ()
    chunk_ns: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    chars: int = 0
    received: int = 0
    partial: bytes = b""
    finish: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)

    def chunk(self, text: str) -> None:
        self.chunk_ns.append(time.perf_counter_ns())
        self.pieces.append(text)
        self.chars += len(text)
        if self.on_chunk is not None:
            self.on_chunk(len(self.chunk_ns))

    def took(self, api: API, data: Mapping[str, Any]) -> tuple[Failure, str] | None:
        """Take one event of the answer; how it failed, where the server sent its error or
        the answer grew past its limits."""
        if "error" in data:
            return "server_error", str(data["error"])[:512]
        self.usage = data.get("usage") or self.usage
        text, reason = content(api, data)
        if text:
            self.chunk(text)
            limits = self.limits
            if len(self.chunk_ns) > limits.max_chunks:
                return "oversized", (
                    f"over {limits.max_chunks} chunks with content, more than the "
                    f"{limits.max_tokens} tokens asked could make"
                )
            if self.chars > limits.max_chars:
                return "oversized", (
                    f"over {limits.max_chars} characters of text, more than the "
                    f"{limits.max_tokens} tokens asked could make"
                )
        self.finish = reason or self.finish
        return None

    def block(self, api: API, data: bytes) -> Streamed | None:
        """Take the next bytes of the answer, as they came off the connection; the request
        as it went once they end it, or take it past its limits."""
        limits = self.limits
        self.received += len(data)
        if self.received > limits.max_bytes:
            return self.ended(
                "oversized",
                f"over {limits.max_bytes} bytes, more than the {limits.max_tokens} tokens "
                "asked could make",
            )
        if time.perf_counter_ns() - self.issued_ns > limits.total_s * 1e9:
            return self.overlong()
        lines = (self.partial + data if self.partial else data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            if (done := self.line(api, line)) is not None:
                return done
        if len(self.partial) > MAX_LINE_BYTES:
            return self.ended("oversized", f"an event line over {MAX_LINE_BYTES} bytes")
        return None

    def overlong(self) -> Streamed:
        return self.ended(
            "overlong",
            f"still answering after {self.limits.total_s:g} s, the most a request may take (the "
            "scenario's max_duration_s and one DLSCOPE_ENDPOINT_TIMEOUT_S)",
        )

    def ended(self, failure: Failure | None = None, cause: str | None = None) -> Streamed:
        # What the server said is kept as data, cleaned of what no consumer reads (a NUL in
        # its error body would make the whole measurement unpublishable, issue 42).
        return Streamed(
            issued_ns=self.issued_ns,
            chunk_ns=self.chunk_ns,
            text="".join(self.pieces),
            finish_reason=None if self.finish is None else cleaned(self.finish[:MAX_NAME]),
            prompt_tokens=_count(self.usage.get("prompt_tokens")),
            completion_tokens=_count(self.usage.get("completion_tokens")),
            failure=failure,
            cause=None if cause is None else scrubbed(cleaned(cause), self.secrets),
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
        if (failed := self.took(api, data)) is not None:
            return self.ended(*failed)
        return None

    def read_to_its_end(self, api: API) -> Streamed:
        """The answer once its stream closed without ``[DONE]``: fine once the server said
        why it finished; otherwise it went away mid-answer."""
        if self.partial:  # a last line without its newline
            line, self.partial = self.partial, b""
            if (done := self.line(api, line)) is not None:
                return done
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
