"""An endpoint worker, as a user runs one: ``dlscope run smollm2 --framework
onnxruntime,endpoint --endpoint URL`` measures the model in-process and as llama.cpp's real
server serves the same weights, in one experiment, with the greedy-token parity gate; the
server's key comes from the environment and is never stored; every request carries the
evaluation's trace context; a server that cannot be used fails the evaluation at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED, EXIT_FAILURES
from harness.deployment import SERVICES, throwaway_deployment
from harness.llama_server import KEY, NOT_BUILT, SERVER_PYTHON, free_port, llama_server
from harness.waiting import experiment_outcome, models_listed
from shared.manifests import ModelManifest
from tests.conftest import POSTGRES_ADMIN_DSN
from tests.e2e.test_cli import dlscope

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.server,
    pytest.mark.skipif(not SERVER_PYTHON.exists(), reason=NOT_BUILT),
]

NEW_TOKENS = 6


@pytest.fixture
def server(llama_url: str) -> str:
    """The session's server (tests/conftest.py); a test that needs a second starts it."""
    return llama_url


class _Recorder(ThreadingHTTPServer):
    upstream: str
    headers_seen: list[dict[str, str]]


class _Forward(BaseHTTPRequestHandler):
    """Passes each request on to the server as it is, streaming the answer back, and keeps
    the request's headers: what the server was sent."""

    server: _Recorder

    def _forward(self, method: str) -> None:
        self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        upstream = self.server.upstream + self.path
        with (
            httpx.Client(timeout=60) as client,
            client.stream(method, upstream, content=body, headers=headers) as answer,
        ):
            self.send_response(answer.status_code)
            for name in ("content-type",):
                if name in answer.headers:
                    self.send_header(name, answer.headers[name])
            self.send_header("Connection", "close")
            self.end_headers()
            for piece in answer.iter_raw():
                self.wfile.write(piece)
                self.wfile.flush()

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorded(server: str) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """The server behind a proxy that records what each request carried: its URL, the
    headers of every request."""
    root = server.removesuffix("/v1")
    proxy = _Recorder(("127.0.0.1", 0), _Forward)
    proxy.upstream, proxy.headers_seen = root, []
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}/v1", proxy.headers_seen
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_served_model_is_measured_beside_the_same_model_in_process(
    smollm2_home: Path, recorded: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, headers_seen = recorded
    result_file = tmp_path / "experiment.json"
    result = dlscope(
        smollm2_home,
        *("run", "smollm2", "--framework", "onnxruntime,endpoint", "--endpoint", url),
        *("-n", "3", "--min-duration", "0", "--max-new-tokens", str(NEW_TOKENS)),
        *("--json", str(result_file)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
    )
    text = result_file.read_text()
    assert KEY not in text, "the API key is never stored or reported"
    document = json.loads(text)
    by_framework = {e["framework"]: e for e in document["evaluations"]}
    assert set(by_framework) == {"onnxruntime", "endpoint"}
    served = by_framework["endpoint"]
    assert served["status"] == "completed", served["error"]
    generation = served["result"]["generation"]
    assert generation["timed"] == "chunk"
    assert generation["requests"] == 3
    assert "first chunk with content" in generation["definitions"]["ttft"]
    assert "inter-chunk" in generation["definitions"]["itl"]
    assert generation["failures"] == {}

    (pair,) = document["experiment"]["comparison"]["parity"]
    # The gate compares the served model's 16 greedy tokens with the in-process model's.
    assert {pair["reference"], pair["candidate"]} == {
        by_framework["onnxruntime"]["evaluation_id"],
        served["evaluation_id"],
    }
    assert 0 <= pair["top1_agreement"] <= 1
    # llama.cpp computes with its Q4_1 weights quantised and its activations too, the ONNX
    # graph in float32 from the same weights dequantised: where the greedy tokens part, the
    # gate says so, and `dlscope run` exits 1 as for any parity failure.
    if pair["within_tolerance"]:
        assert result.returncode in COMPLETED, result.stderr
    else:
        assert result.returncode == 1, result.stderr
    assert "parity" in " ".join(result.stdout.split())

    # Every request the worker sent (its check, the parity request, warm-up and timed ones)
    # carried the experiment's trace context.
    posts = [h for h in headers_seen if "traceparent" in h]
    assert len(posts) >= 1 + 3, headers_seen
    trace_ids = {h["traceparent"].split("-")[1] for h in posts}
    assert trace_ids == {document["trace_id"]}
    assert all(h.get("authorization") == f"Bearer {KEY}" for h in headers_seen)


def test_the_measured_event_keeps_every_chunk_time_and_both_token_counts(
    smollm2_home: Path, server: str, tmp_path: Path
) -> None:
    result_file = tmp_path / "served.json"
    result = dlscope(
        smollm2_home,
        *("run", "smollm2", "--framework", "endpoint", "--endpoint", server),
        *("-n", "3", "--min-duration", "0", "--max-new-tokens", str(NEW_TOKENS)),
        *("--json", str(result_file)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
    )
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    document = json.loads(result_file.read_text())
    (measured,) = (e["payload"] for e in document["events"] if e["type"] == "evaluation.measured")
    record = measured["generation"]
    assert record["timed"] == "chunk"
    for request in record["requests"]:
        # llama.cpp streams one token a chunk; the length is pinned (end of sequence kept out).
        assert len(request["token_ns"]) == NEW_TOKENS
        assert request["token_ns"] == sorted(request["token_ns"])
        assert abs(request["counted_tokens"] - NEW_TOKENS) <= 1
        assert request["input_tokens"] > 0
    served = record["served"]
    assert served["url"] == server
    assert served["model"] == "smollm2"
    assert served["api"] == "completions"  # smollm2's prompts are raw text, not chat
    assert served["metrics_before"] is None
    assert "no Prometheus metrics" in served["metrics_note"]
    # The server runs on this host: its CPU time is the measurement's, not contention.
    assert served["server_process"].startswith("pid ")
    table = " ".join(result.stdout.split())
    assert "inter-chunk latency" in table


def test_a_server_that_cannot_be_used_fails_the_evaluation_at_once_saying_why(
    smollm2_home: Path, server: str
) -> None:
    refused = dlscope(
        smollm2_home,
        *("run", "smollm2", "--framework", "endpoint", "--endpoint", server, "-n", "2"),
        DLSCOPE_ENDPOINT_API_KEY="not-the-key",
    )
    assert refused.returncode != 0
    assert "refused the API key (HTTP 401)" in " ".join((refused.stderr + refused.stdout).split())

    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    unreachable = dlscope(
        smollm2_home,
        *("run", "smollm2", "--framework", "endpoint", "--endpoint", nowhere, "-n", "2"),
    )
    assert unreachable.returncode != 0
    assert f"the endpoint {nowhere} cannot be reached" in " ".join(
        (unreachable.stderr + unreachable.stdout).split()
    )


# Alone: as the in-process sweep and search (tests/e2e/test_cli.py).
@pytest.mark.alone
def test_a_sweep_of_loads_runs_on_a_served_model(
    smollm2_home: Path, server: str, tmp_path: Path
) -> None:
    sweep_file = tmp_path / "sweep.json"
    swept = dlscope(
        smollm2_home,
        *("sweep", "smollm2", "--framework", "endpoint", "--endpoint", server),
        *("--levels", "1,2", "-n", "4", "--min-duration", "0", "--max-new-tokens", "4"),
        *("--json", str(sweep_file)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
    )
    # llama-cpp-python's server ends the request in flight when the next arrives: at two
    # streams the answers come back cut short, truncated failures rather than samples, so
    # that load is INVALID (measured twice, disturbed both times) and the sweep exits 4.
    assert swept.returncode == EXIT_FAILURES, swept.stderr + swept.stdout
    document = json.loads(sweep_file.read_text())
    loads = document["loads"]
    assert set(loads) == {"1", "2"}
    for streams, evaluation in loads.items():
        assert evaluation["framework"] == "endpoint"
        assert evaluation["request"]["scenario"]["concurrency"] == int(streams)
        generation = evaluation["result"]["generation"]
        assert generation["timed"] == "chunk"
    assert loads["1"]["result"]["generation"]["requests"] >= 4
    assert loads["2"]["result"]["generation"]["failures"]["truncated"] >= 2
    assert "requests_failed" in document["remeasured"]["2"]
    shown = " ".join(swept.stdout.split())
    assert "smollm2 on endpoint: loads" in shown
    assert "2 concurrent stream(s): disturbed twice" in shown

    # The goodput search against the server: one stream's p50 TTFT is its prefill; two
    # streams on one server queue behind each other, so a bound of 1.5 x one stream's median
    # separates them on any machine.
    alone = loads["1"]["result"]["generation"]["ttft"]["median"]["value_ns"] / 1e6
    search_file = tmp_path / "search.json"
    searched = dlscope(
        smollm2_home,
        *("sweep", "smollm2", "--framework", "endpoint", "--endpoint", server, "--search"),
        *("--max-concurrency", "4", "-n", "12", "--min-duration", "0", "--max-new-tokens", "4"),
        *("--slo-percentile", "0.5", "--ttft-bound", f"{alone * 1.5:.1f}"),
        *("--json", str(search_file)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
    )
    assert searched.returncode in COMPLETED, searched.stderr + searched.stdout
    search = json.loads(search_file.read_text())["search"]
    assert search["probes"][0]["load"] == 1
    assert search["probes"][0]["judgement"] in ("meets", "indeterminate")
    shown = " ".join(searched.stdout.split())
    assert "goodput search: the highest load meeting p50 TTFT" in shown
    # Where the search got to two streams, their truncated answers kept it from deciding.
    if any(p["load"] >= 2 for p in search["probes"]):
        assert search["uncertain"] == [2]
        assert "uncertain: the probe at 2 was INVALID beyond the bounds twice" in shown


@pytest.mark.rabbitmq
@pytest.mark.postgres
async def test_two_servers_are_compared_in_one_experiment(
    rabbitmq_url: str,
    smollm2_zoo: dict[str, ModelManifest],
    server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two llama.cpp servers of the same build and weights, each fronted by an endpoint
    # worker of a deployment: one experiment request measures both, one after the other,
    # and the parity gate holds them to the same greedy tokens.
    smollm2 = smollm2_zoo["onnxruntime"]
    monkeypatch.setenv("DLSCOPE_REGISTRY_SOURCE_ROOTS", str(Path(smollm2.source.uri).parent))
    monkeypatch.setenv("DLSCOPE_ENDPOINT_API_KEY", KEY)
    with llama_server(tmp_path / "other.log") as (other, _):
        async with throwaway_deployment(
            rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="srv", frameworks=("endpoint",)
        ) as deployment:
            for service in SERVICES:
                if service != "workers":
                    deployment.start(service)
            served_by = {"server-a": server, "server-b": other}
            for agent, url in served_by.items():
                deployment.start_worker(agent, "endpoint", agent, "--endpoint", url)
            async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
                await deployment.ready(http)
                registered = await http.post("/v1/models", json=smollm2.model_dump(mode="json"))
                assert registered.status_code == 201, registered.text
                await models_listed(http, ["smollm2"], timeout=60)
                response = await http.post(
                    "/v1/experiments",
                    json={
                        "model": "smollm2",
                        "frameworks": ["endpoint"],
                        "scenario": {
                            "iterations": 3,
                            "min_duration_s": 0,
                            "warmup": 1,
                            "max_new_tokens": NEW_TOKENS,
                        },
                    },
                )
                assert response.status_code == 202, response.text
                experiment = await experiment_outcome(http, response.json()["id"], timeout=240)
                comparison = experiment["comparison"]
                assert comparison["failures"] == []
                members = {m["agent_id"]: m for m in comparison["evaluations"]}
                assert set(members) == set(served_by)
                for agent, member in members.items():
                    assert member["framework"] == "endpoint"
                    assert member["tokens"]["output_tokens_per_s"] > 0
                    events = (
                        await http.get(f"/v1/evaluations/{member['evaluation_id']}/events")
                    ).json()
                    (measured,) = [e for e in events if e["type"] == "evaluation.measured"]
                    assert measured["payload"]["generation"]["served"]["url"] == served_by[agent]
    (pair,) = comparison["parity"]
    assert pair["top1_agreement"] == 1.0, "the same weights on the same server build"
    assert comparison["parity_ok"] is True
