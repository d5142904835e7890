"""An OpenAI-compatible inference server (vLLM, llama.cpp's, SGLang, TGI, ...) as a benchmark
sends requests to it: the chat-completions or completions API, streamed, every chunk timed
as it arrives.

What is measured and what is derived. A server streams *chunks*, and one chunk may carry
several tokens, so the time of every chunk with content is measured and the first one's is
the time to first token; how many tokens the output holds is counted by the model's
tokenizer on the text received and, where the server says, by the server (``usage``). Any
per-token figure (TPOT) divides by a count: it is derived, not seen.

Errors are data: an HTTP error status, a timeout, a connection refused or dropped
mid-stream ends that request with its kind and its cause, and what arrived before it is
kept. Only ``check`` raises, before a run, for what would fail every request: an
unreachable URL, a server that does not speak the API, a model it does not serve, a key it
refuses.

One client per endpoint, shared by every stream of a run: HTTP/1.1 connections are kept
alive and reused (at most ``max_connections`` open), each request bounded by a connect and
a read timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import orjson

from shared.errors import ConfigurationError

__all__ = [
    "API",
    "FAILURES",
    "MAX_METRICS",
    "Endpoint",
    "Sampling",
    "Streamed",
    "prometheus_values",
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
# A server's metrics as a run records them: at most this many series, read within this time.
MAX_METRICS = 256
_METRICS_TIMEOUT_S = 5.0


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


@dataclass
class _Reading:
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


class Endpoint:
    """A server at ``url`` (its API root, e.g. ``http://127.0.0.1:8000/v1``) serving
    ``model``, asked through ``api``."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api: API = "chat",
        api_key: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_connections: int = 64,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.api = api
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def check(self) -> list[str]:
        """The models the server serves, once it is shown to serve ``model`` through the
        OpenAI API; a ``ConfigurationError`` naming what is wrong otherwise."""
        models = self.models()
        if self.model not in models:
            raise ConfigurationError(
                f"the endpoint {self.url} does not serve {self.model!r}; it serves "
                f"{', '.join(models) or 'no model'}"
            )
        return models

    def models(self) -> list[str]:
        """The models the server lists through the OpenAI API; a ``ConfigurationError``
        naming what is wrong when it cannot be asked."""
        where = f"the endpoint {self.url}"
        try:
            response = self._client.get("/models")
        except httpx.ConnectError as exc:
            raise ConfigurationError(f"{where} cannot be reached: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise ConfigurationError(f"{where} did not answer: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise ConfigurationError(f"{where} failed: {exc!r}") from exc
        if response.status_code in (401, 403):
            raise ConfigurationError(
                f"{where} refused the API key (HTTP {response.status_code}); set the key its "
                "server expects"
            )
        models = _served(response)
        if models is None:
            raise ConfigurationError(
                f"{where} is not an OpenAI-compatible API: GET {self.url}/models answered "
                f"HTTP {response.status_code} without a model list"
            )
        return models

    def metrics(self) -> tuple[dict[str, float] | None, str | None]:
        """The server's own Prometheus metrics (``/metrics`` beside the API root: queue
        lengths, KV-cache use, preemptions on vLLM), at most ``MAX_METRICS`` series; or None
        and why not, for a server without them."""
        root = self.url.removesuffix("/v1")
        try:
            response = self._client.get(f"{root}/metrics", timeout=_METRICS_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return None, f"GET {root}/metrics failed: {exc!r}"
        if response.status_code != 200:
            status = response.status_code
            return None, f"the server has no Prometheus metrics (GET {root}/metrics: HTTP {status})"
        return prometheus_values(response.text), None

    def stream(
        self,
        prompt: str,
        sampling: Sampling,
        *,
        headers: Mapping[str, str] | None = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> Streamed:
        """Send ``prompt`` (a user message for ``chat``, the text to continue for
        ``completions``) and read the streamed answer to its end; ``headers`` go with it
        (a W3C ``traceparent``, say), ``on_chunk`` hears of each chunk with content as it
        comes (how many so far)."""
        path, body = self.request(prompt, sampling)
        reading = _Reading(time.perf_counter_ns(), on_chunk)
        try:
            with self._client.stream(
                "POST", path, content=orjson.dumps(body), headers=_json_headers(headers)
            ) as response:
                if response.status_code != 200:
                    detail = response.read()[:512].decode(errors="replace")
                    return reading.ended("http_error", f"HTTP {response.status_code}: {detail}")
                return self._read(response, reading)
        except httpx.TimeoutException as exc:
            return reading.ended("timeout", repr(exc))
        except httpx.ConnectError as exc:
            return reading.ended("refused", str(exc))
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            return reading.ended("disconnected", str(exc) or repr(exc))
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            return reading.ended("malformed", f"a chunk the API does not describe: {exc}")

    def _read(self, response: httpx.Response, reading: _Reading) -> Streamed:
        for event in _events(response.iter_lines()):
            if event is None:
                return reading.ended()
            if "error" in event:
                return reading.ended("server_error", str(event["error"])[:512])
            reading.usage = event.get("usage") or reading.usage
            text, reason = self._content(event)
            if text:
                reading.chunk(text)
            reading.finish = reason or reading.finish
        # No [DONE]: a server that closes the stream after its last chunk is fine once it
        # said why it finished; otherwise it went away mid-answer.
        if reading.finish is None:
            return reading.ended("disconnected", "the stream ended before the answer did")
        return reading.ended()

    def request(self, prompt: str, sampling: Sampling) -> tuple[str, dict[str, Any]]:
        """The path and JSON body ``stream`` posts for ``prompt``."""
        body: dict[str, Any] = {
            "model": self.model,
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
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            return "/chat/completions", body
        body["prompt"] = prompt
        return "/completions", body

    def _content(self, event: Mapping[str, Any]) -> tuple[str, str | None]:
        choices = event.get("choices") or []
        if not choices:
            return "", None  # the usage chunk
        choice = choices[0]
        if self.api == "chat":
            text = (choice.get("delta") or {}).get("content") or ""
        else:
            text = choice.get("text") or ""
        if not isinstance(text, str):
            raise TypeError(f"content is a {type(text).__name__}, not text")
        return text, choice.get("finish_reason")


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any] | None]:
    """The JSON of each server-sent event's ``data:`` line; None for ``[DONE]``."""
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            yield None
            return
        event = orjson.loads(data)
        if not isinstance(event, dict):
            raise ValueError(f"a chunk that is a {type(event).__name__}, not an object")
        yield event


def _served(response: httpx.Response) -> list[str] | None:
    if response.status_code != 200:
        return None
    try:
        listed = response.json()
    except ValueError:
        return None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def _json_headers(extra: Mapping[str, str] | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **(extra or {})}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def prometheus_values(text: str) -> dict[str, float]:
    """The samples of a Prometheus text exposition, ``name{labels}`` to value, the first
    ``MAX_METRICS`` of them; comments and lines that are not samples are skipped."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        labels_end = line.rfind("}") + 1  # 0 when the series has no labels
        if labels_end:
            series, rest = line[:labels_end], line[labels_end:]
        else:
            series, _, rest = line.partition(" ")
        fields = rest.split()
        if not series or not fields:
            continue
        try:
            values[series.strip()] = float(fields[0])
        except ValueError:
            continue
        if len(values) >= MAX_METRICS:
            break
    return values
