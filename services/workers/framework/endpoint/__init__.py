"""A model served by an OpenAI-compatible server (vLLM, llama.cpp's server, SGLang, TGI, …)
as a generation backend: the HTTP client that times each chunk (``client``), the server as
the worker announces it (``server``), and the adapter to the generation port (``backend``)."""

from services.workers.framework.endpoint.backend import EndpointBackend
from services.workers.framework.endpoint.client import (
    API,
    FAILURES,
    MAX_METRICS,
    Endpoint,
    Sampling,
    Streamed,
    prometheus_values,
)
from services.workers.framework.endpoint.server import (
    API_VERSION,
    described_endpoint,
    local_server,
    public_url,
    unusable,
)

__all__ = [
    "API",
    "API_VERSION",
    "FAILURES",
    "MAX_METRICS",
    "Endpoint",
    "EndpointBackend",
    "Sampling",
    "Streamed",
    "described_endpoint",
    "local_server",
    "prometheus_values",
    "public_url",
    "unusable",
]
