"""The server an endpoint worker fronts, as the worker sees it: whether there is one, what it
serves, its process when it runs on this host, and its URL as events may show it.

The server is named by the worker's options (``handover.EndpointOptions``: its API root,
e.g. ``http://127.0.0.1:8000/v1``, and the key it expects), which the worker read once from
its settings and sent over its connection: the key never travels in an event or an argument.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import psutil

from services.workers.framework.endpoint.client import API, Endpoint
from services.workers.framework.endpoint.load import LoadClient
from services.workers.handover import EndpointOptions
from shared.credentials import public_url
from shared.errors import ConfigurationError

__all__ = ["API_VERSION", "connect", "described_endpoint", "local_server", "public_url", "unusable"]

# What the framework's "version" is for an endpoint: the API it speaks (the server's own
# software and version are its own business; the worker's device names the server).
API_VERSION = "1"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def unusable(options: EndpointOptions) -> str | None:
    """Why this worker can measure nothing: no endpoint named, or two credentials for it."""
    if not options.url:
        return (
            "no endpoint to measure: start the worker with --endpoint URL (an OpenAI-compatible "
            "API root, e.g. http://127.0.0.1:8000/v1), or set DLSCOPE_ENDPOINT_URL"
        )
    if options.api_key and urlsplit(options.url).password is not None:
        return (
            f"the endpoint {public_url(options.url)} is given a password in its URL and an API "
            "key (DLSCOPE_ENDPOINT_API_KEY): both would be its Authorization header; give one"
        )
    return None


def described_endpoint(options: EndpointOptions) -> dict[str, Any]:
    """The server as the worker announces it: its URL and the models it serves now."""
    with connect(options, "") as endpoint:
        models = endpoint.models()  # ConfigurationError: announced as the device's error
    return {"endpoint": {"url": public_url(options.url or ""), "models": models}}


def connect(
    options: EndpointOptions,
    model: str,
    *,
    api: API = "completions",
    longest_phase_s: float | None = None,
) -> Endpoint:
    """A blocking client of the server, for one request at a time (the checks, the metrics,
    the parity tokens); ``longest_phase_s``: the scenario's (``request_limit_s``)."""
    url, settings = _client_settings(options, 1, longest_phase_s)
    return Endpoint(url, model, api=api, **settings)


def load_client(
    options: EndpointOptions, model: str, *, api: API, streams: int, longest_phase_s: float
) -> LoadClient:
    """The timed requests' client of the server, for ``streams`` requests at once."""
    url, settings = _client_settings(options, streams, longest_phase_s)
    return LoadClient(url, model, api=api, **settings)


def request_limit_s(options: EndpointOptions, longest_phase_s: float) -> float:
    """The most one request may take: the longest phase it can belong to and one chunk
    timeout beyond. A request still answering then is one no phase waits for, and one byte a
    second would otherwise hold the worker and its device until the framework's deadline."""
    return longest_phase_s + options.timeout_s


def _client_settings(
    options: EndpointOptions, streams: int, longest_phase_s: float | None
) -> tuple[str, dict[str, Any]]:
    """The server's URL and what either client takes from the options, for ``streams``
    requests at once."""
    if (why := unusable(options)) is not None or not options.url:
        raise ConfigurationError(why or "no endpoint")
    settings: dict[str, Any] = {
        "api_key": options.api_key,
        "timeout_s": options.timeout_s,
        "connect_timeout_s": options.connect_timeout_s,
        "max_connections": max(streams, 1),
    }
    if longest_phase_s is not None:
        settings["request_limit_s"] = request_limit_s(options, longest_phase_s)
    return options.url, settings


def local_server(url: str) -> psutil.Process | None:
    """The process of this host listening on ``url``'s port when ``url`` names this host:
    the server under test, whose CPU time is the measurement's, not another process's. None
    when it is elsewhere, or when this host does not say (its sockets are not ours to see)."""
    parsed = urlsplit(url)
    if parsed.hostname not in _LOOPBACK:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        for connection in psutil.net_connections(kind="tcp"):
            listening = connection.status == psutil.CONN_LISTEN
            if listening and connection.laddr and connection.laddr.port == port and connection.pid:
                return psutil.Process(connection.pid)
    except psutil.Error:
        return None
    return None


def process_name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "gone"
