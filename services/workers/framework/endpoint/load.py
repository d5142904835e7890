"""The timed requests' client: an OpenAI-compatible server asked from one event loop
(uvloop), thousands of streamed requests in flight on kept-alive HTTP/1.1 connections, every
chunk timed as it arrives.

aiohttp, chosen by measurement: on a 2-core AMD EPYC against ``harness.openai_stub`` (8
chunks an answer, 32 streams), aiohttp took 0.24-0.31 ms of the client's CPU a request and
held 2 100 requests/s; httpx's asynchronous client 2.7-2.9 ms and 225/s (its streams go
through h11, in Python).

A request's body is made before its time (``Prepared``, at the job's start) and its clock
starts at the send; what it measures and how it fails are the blocking client's
(``client``, ``wire``): an HTTP error status, a timeout, a connection refused or dropped
mid-stream ends that request with its kind and cause, keeping what arrived.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import aiohttp
import orjson

from services.workers.framework.endpoint.wire import (
    API,
    HEADERS,
    REQUEST_LIMIT_S,
    Limits,
    Reading,
    Sampling,
    Streamed,
    request_body,
)
from shared.credentials import secrets_of

__all__ = ["LoadClient", "Prepared"]

# Descriptors kept free beyond the connections: the worker's own files, sockets and pipes.
_SPARE_FILES = 256


@dataclass(frozen=True)
class Prepared:
    """One request's path and body, ready to send, and the most its answer may take."""

    path: str
    body: bytes
    limits: Limits


class LoadClient:
    """Requests to the server at ``url`` (its API root) serving ``model``, through ``api``,
    at most ``max_connections`` in flight; used within ``async with``."""

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
        self.model = model
        self.api = api
        self.request_limit_s = request_limit_s
        self._secrets = secrets_of(self.url, api_key)
        self._headers = dict(HEADERS)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=timeout_s
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def prepare(self, prompt: str, sampling: Sampling) -> Prepared:
        path, body = request_body(self.model, self.api, prompt, sampling)
        limits = Limits(sampling.max_tokens, self.request_limit_s)
        return Prepared(self.url + path, orjson.dumps(body), limits)

    async def __aenter__(self) -> LoadClient:
        _allow_open_files(self._max_connections + _SPARE_FILES)
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, limit_per_host=0, ttl_dns_cache=None
        )
        sent = aiohttp.TraceConfig()
        sent.on_request_headers_sent.append(_sent)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            trace_configs=[sent],
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stream(
        self,
        request: Prepared,
        *,
        headers: Mapping[str, str] | None = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> Streamed:
        """Send ``request`` and read the streamed answer to its end; ``headers`` go with it
        (a W3C ``traceparent``, say)."""
        session = self._session
        assert session is not None, "used within async with"
        sent = {**self._headers, **headers} if headers else self._headers
        reading = Reading(time.perf_counter_ns(), on_chunk, request.limits, self._secrets)
        # The whole request bounded too, for a server that sends nothing after its headers:
        # a read timeout alone would wait for as long as bytes keep coming.
        bound = asyncio.timeout(request.limits.total_s)
        try:
            async with bound:
                return await self._read(session, request, sent, reading)
        except TimeoutError as exc:
            if bound.expired():  # this bound, not the connect or read timeout
                return reading.overlong()
            return reading.ended("timeout", repr(exc))
        except aiohttp.ClientConnectorError as exc:
            return reading.ended("refused", str(exc))
        except aiohttp.ClientError as exc:
            return reading.ended("disconnected", str(exc) or repr(exc))
        except (ValueError, TypeError) as exc:  # orjson's errors are ValueErrors
            return reading.ended("malformed", f"a chunk the API does not describe: {exc}")

    async def _read(
        self,
        session: aiohttp.ClientSession,
        request: Prepared,
        headers: Mapping[str, str],
        reading: Reading,
    ) -> Streamed:
        async with session.post(
            request.path, data=request.body, headers=headers, trace_request_ctx=reading
        ) as response:
            if response.status != 200:
                detail = (await response.content.read(512)).decode(errors="replace")
                return reading.ended("http_error", f"HTTP {response.status}: {detail}")
            # Blocks as they come, not lines: aiohttp holds a line whole until its end.
            async for block in response.content.iter_any():
                if (done := reading.block(self.api, block)) is not None:
                    return done
            return reading.read_to_its_end(self.api)


async def _sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    """The request's clock starts at its send, not before aiohttp has made it ready: the
    time between is the client's, in its lag or delay, never in the server's TTFT."""
    reading: Reading = context.trace_request_ctx
    reading.issued_ns = time.perf_counter_ns()


def _allow_open_files(wanted: int) -> None:
    """Raise this process's soft limit on open files towards ``wanted`` (a connection is one),
    as far as its hard limit lets it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, ceiling), hard))
