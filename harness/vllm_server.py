"""vLLM's CPU build (installed by `make test` into .venv-vllm) serving SmolLM2 as a float32
checkpoint of the same weights (scripts/vllm-checkpoint.py): the second real server the
endpoint tests measure, and the one that exports OpenTelemetry spans for its requests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from harness.llama_server import KEY, SERVED, free_port, serving
from shared.config import REPOSITORY_ROOT, child_environment

__all__ = ["CHECKPOINT", "NOT_INSTALLED", "PLATFORM", "VLLM", "vllm_server"]

VENV = REPOSITORY_ROOT / ".venv-vllm"
VLLM = VENV / "bin" / "vllm"
CHECKPOINT = VENV / "smollm2"
NOT_INSTALLED = "vLLM is not installed here: `make test` installs it into .venv-vllm"
# Its start on 2 cores: about 50 s (without --enforce-eager, compiling the graph first, 3 min).
START_S = 300
# The platform vLLM's CPU wheel is for, for anything that imports vllm (the server, its bench
# client): it otherwise guesses from its own version, which the CPU wheel does not name, and
# loads its AVX-512 kernels on CPUs without AVX-512.
PLATFORM = {"VLLM_TARGET_DEVICE": "cpu"}


@contextlib.contextmanager
def vllm_server(log: Path, *, traces: str | None = None) -> Iterator[str]:
    """vLLM on a free port serving SmolLM2 as ``SERVED`` to the key ``KEY``, exporting its
    spans over OTLP/HTTP to ``traces`` (a ``…/v1/traces`` URL) if given; its API root."""
    port = free_port()
    environment = child_environment(
        **PLATFORM,
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB: SmolLM2 at 2 048 tokens needs far less
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="vllm",
    )
    command = [
        str(VLLM),
        "serve",
        str(CHECKPOINT),
        *("--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", "2048"),
        # No graph compilation: it would take three minutes of the suite to start.
        "--enforce-eager",
        *("--host", "127.0.0.1", "--port", str(port), "--api-key", KEY),
        *(("--otlp-traces-endpoint", traces) if traces else ()),
    ]
    with log.open("wb") as out:
        # A session of its own: vLLM's engine runs in child processes, stopped with it.
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    try:
        yield serving(process, port, log, what="vLLM", timeout=START_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
