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

import math
import time
from collections.abc import Callable, Mapping

import httpx
import orjson

from services.workers.framework.endpoint.wire import (
    API,
    FAILURES,
    HEADERS,
    REQUEST_LIMIT_S,
    Limits,
    Reading,
    Sampling,
    Streamed,
    request_body,
)
from shared.credentials import public_url, scrubbed, secrets_of
from shared.errors import ConfigurationError
from shared.inputs import MAX_ITEMS, MAX_NAME, cleaned

__all__ = [
    "API",
    "FAILURES",
    "MAX_METRICS",
    "Endpoint",
    "Sampling",
    "Streamed",
    "prometheus_values",
]

# A server's metrics as a run records them: at most this many series, read within this time.
MAX_METRICS = 256
_METRICS_TIMEOUT_S = 5.0


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
        request_limit_s: float = REQUEST_LIMIT_S,
    ) -> None:
        self.url = url.rstrip("/")
        # The URL as messages show it, and what they must never quote (issue 42).
        self.shown = public_url(self.url)
        self._secrets = secrets_of(self.url, api_key)
        self.model = model
        self.api = api
        self.request_limit_s = request_limit_s
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
                f"the endpoint {self.shown} does not serve {self.model!r}; it serves "
                f"{', '.join(models) or 'no model'}"
            )
        return models

    def models(self) -> list[str]:
        """The models the server lists through the OpenAI API; a ``ConfigurationError``
        naming what is wrong when it cannot be asked."""
        where = f"the endpoint {self.shown}"
        try:
            response = self._client.get("/models")
        except httpx.ConnectError as exc:
            raise ConfigurationError(f"{where} cannot be reached: {self._quoted(exc)}") from exc
        except httpx.TimeoutException as exc:
            raise ConfigurationError(f"{where} did not answer: {self._quoted(exc)}") from exc
        except httpx.HTTPError as exc:
            raise ConfigurationError(f"{where} failed: {self._quoted(exc)}") from exc
        if response.status_code in (401, 403):
            raise ConfigurationError(
                f"{where} refused the API key (HTTP {response.status_code}); set the key its "
                "server expects"
            )
        models = _served(response)
        if models is None:
            raise ConfigurationError(
                f"{where} is not an OpenAI-compatible API: GET {self.shown}/models answered "
                f"HTTP {response.status_code} without a model list"
            )
        return models

    def metrics(self) -> tuple[dict[str, float] | None, str | None]:
        """The server's own Prometheus metrics (``/metrics`` beside the API root: queue
        lengths, KV-cache use, preemptions on vLLM), at most ``MAX_METRICS`` series; or None
        and why not, for a server without them."""
        root, shown = self.url.removesuffix("/v1"), self.shown.removesuffix("/v1")
        try:
            response = self._client.get(f"{root}/metrics", timeout=_METRICS_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return None, f"GET {shown}/metrics failed: {self._quoted(exc)}"
        if response.status_code != 200:
            status = response.status_code
            return (
                None,
                f"the server has no Prometheus metrics (GET {shown}/metrics: HTTP {status})",
            )
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
        path, body = request_body(self.model, self.api, prompt, sampling)
        limits = Limits(sampling.max_tokens, self.request_limit_s)
        reading = Reading(time.perf_counter_ns(), on_chunk, limits, self._secrets)
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

    def _quoted(self, exc: Exception) -> str:
        """An HTTP library's error as a message may quote it: its secrets hidden."""
        return scrubbed(cleaned(repr(exc) if not str(exc) else str(exc)), self._secrets)

    def _read(self, response: httpx.Response, reading: Reading) -> Streamed:
        # Blocks as they come, not lines: a line is held whole until its end, however long.
        for block in response.iter_bytes():
            if (done := reading.block(self.api, block)) is not None:
                return done
        return reading.read_to_its_end(self.api)


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
    # Names as a worker announces them: cleaned and bounded as its announcement's contract
    # is, so that a server's odd list cannot make the announcement unreadable (issue 42).
    return [
        cleaned(str(m["id"])[:MAX_NAME])
        for m in data[:MAX_ITEMS]
        if isinstance(m, dict) and "id" in m
    ]


def _json_headers(extra: Mapping[str, str] | None) -> dict[str, str]:
    return {**HEADERS, **(extra or {})}


def prometheus_values(text: str) -> dict[str, float]:
    """The samples of a Prometheus text exposition, ``name{labels}`` to value, the first
    ``MAX_METRICS`` of them; comments, lines that are not samples and samples that are not
    finite (``NaN``: a quantile with no observations yet) are skipped."""
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
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            values[cleaned(series.strip()[:MAX_NAME])] = value
        if len(values) >= MAX_METRICS:
            break
    return values
