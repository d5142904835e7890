"""One model on every CPU framework, as a user asks for it: one HTTP request to a deployment
whose services and workers (one process per framework) run on RabbitMQ and PostgreSQL, the
same from ``dlscope submit --framework all``, and ``dlscope run --framework all`` embedded.

The model is the zoo's digits CNN, built here the way ``dlscope zoo build`` builds it: the
same weights exported for onnxruntime, pytorch and tensorflow; the OpenCL worker runs the
ONNX export."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED
from dlscope.zoo import BuiltModel
from harness.deployment import Deployment, throwaway_deployment
from harness.waiting import experiment_outcome, models_listed
from shared.config import REPOSITORY_ROOT
from shared.manifests import ModelManifest
from tests.conftest import POSTGRES_ADMIN_DSN, register_model, runnable

pytestmark = [pytest.mark.e2e]

# The three exports of the digits CNN, and dlscope's OpenCL engine running the ONNX one.
# OpenCL only where its device compiles kernels here (see tests.conftest.opencl_problem).
FRAMEWORKS = runnable(("onnxruntime", "pytorch", "tensorflow", "opencl"))


@pytest.fixture(scope="module")
def zoo(digits_zoo: list[BuiltModel]) -> list[BuiltModel]:
    return digits_zoo


def dlscope(environment: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env={**environment, "COLUMNS": "200"},
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


async def compared(http: httpx.AsyncClient, experiment_id: str) -> dict[str, Any]:
    experiment = await experiment_outcome(http, experiment_id, timeout=240)
    assert experiment["status"] == "compared", experiment["error"]
    return experiment


@pytest.mark.rabbitmq
@pytest.mark.postgres
async def test_one_http_request_evaluates_the_digits_model_on_every_cpu_framework(
    rabbitmq_url: str, zoo: list[BuiltModel]
) -> None:
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="exp", frameworks=FRAMEWORKS
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)  # a worker of every framework is online
            for model in zoo:
                body = model.manifest.model_dump(mode="json")
                registered = await register_model(http, body)
                assert registered.status_code == 201, registered.text

            # Registered is not yet listed: the read model follows once the recorder has
            # stored the registrations, and the experiment finds exports in the read model.
            await models_listed(http, [model.manifest.name for model in zoo], timeout=60)
            response = await http.post(
                "/v1/experiments",
                json={
                    "model": "digits-cnn",
                    "frameworks": "all",
                    "dataset": "digits",
                    "split": "test",
                    "scenario": {
                        "iterations": 40,
                        "min_duration_s": 0,
                        "warmup": 5,
                        "batch_size": 32,
                    },
                },
            )
            assert response.status_code == 202, response.text
            accepted = response.json()
            assert {ref["model"] for ref in accepted["models"]} == {
                model.manifest.name for model in zoo
            }
            experiment = await compared(http, accepted["id"])

            await _the_cli_compares_the_same_deployment(deployment)

    comparison = experiment["comparison"]
    assert comparison["complete"] is True
    assert comparison["failures"] == []
    # One member per framework, each on its own worker process
    results = {r["framework"]: r for r in comparison["evaluations"]}
    assert set(results) == set(FRAMEWORKS)
    assert len({r["agent_id"] for r in results.values()}) == len(FRAMEWORKS)
    expected_top1 = zoo[0].top1
    for framework, result in results.items():
        latency = result["latency"]
        assert latency["count"] == 40, framework
        assert 0 < latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"], framework
        assert latency["mean_ms"] > 0
        assert latency["throughput_per_s"] > 0
        assert result["framework_version"], framework
        assert result["accuracy"]["top1"] == pytest.approx(expected_top1, abs=1e-9), framework
    # Every pair agrees: the same weights give the same logits, within float noise
    pairs = len(FRAMEWORKS) * (len(FRAMEWORKS) - 1) // 2
    assert len(comparison["parity"]) == pairs
    for pair in comparison["parity"]:
        assert pair["comparable"] is True
        assert pair["within_tolerance"] is True, pair["reason"]
        assert pair["top1_agreement"] == 1.0
        assert pair["max_abs_error"] < 1e-4
    assert comparison["parity_ok"] is True


async def _the_cli_compares_the_same_deployment(deployment: Deployment) -> None:
    environment = {
        **deployment.environment,
        "DLSCOPE_GATEWAY_URL": deployment.gateway_url,
    }
    result = await asyncio.to_thread(
        dlscope, environment, "submit", "digits-cnn", "--framework", "all", "-n", "10"
    )
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    shown = " ".join(result.stdout.split())
    assert f"digits-cnn on {len(FRAMEWORKS)} frameworks (cpu)" in shown
    for framework in FRAMEWORKS:
        assert framework in shown
    assert "parity: every pair within tolerance" in shown


def test_run_all_frameworks_embedded_prints_one_comparison_and_writes_it(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path)
    result_file = tmp_path / "experiment.json"
    result = dlscope(
        environment,
        "run",
        "digits-cnn",
        "--framework",
        "all",
        "--dataset",
        "digits",
        "--split",
        "test",
        "-n",
        "20",
        "-b",
        "32",
        "--json",
        str(result_file),
    )
    # Twenty queries on a shared machine may well be INVALID (exit 3); parity is shown either way.
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    shown = " ".join(result.stdout.split())
    assert "parity vs reference" in shown
    assert "parity: every pair within tolerance" in shown

    document = json.loads(result_file.read_text())
    comparison = document["experiment"]["comparison"]
    frameworks = {r["framework"] for r in comparison["evaluations"]}
    # Every framework installed here with an export of the model
    assert frameworks >= {"onnxruntime", "pytorch"}
    assert frameworks | set(document["not_installed"]) >= set(FRAMEWORKS)
    assert comparison["parity_ok"] is True
    assert {e["status"] for e in document["evaluations"]} == {"completed"}
    # What each member cost, in the table and in the comparison.
    assert "CPU ms/query" in shown
    assert "peak MiB" in shown
    for member in comparison["evaluations"]:
        assert member["cost"]["cpu_s_per_query"] > 0
        assert member["cost"]["peak_memory"]["bytes"] > 0
        assert member["verdict"]["status"] in ("VALID", "INVALID")
    assert {e["request"]["experiment_id"] for e in document["evaluations"]} == {
        document["experiment"]["experiment_id"]
    }


@pytest.mark.rabbitmq
@pytest.mark.postgres
async def test_a_text_encoder_registered_over_http_is_compared_across_frameworks(
    rabbitmq_url: str, minilm_zoo: dict[str, ModelManifest]
) -> None:
    frameworks = ("onnxruntime", "pytorch")
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="txt", frameworks=frameworks
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)
            for manifest in minilm_zoo.values():
                # The graph and the tokenizer are uploaded with the manifest, as the CLI does.
                registered = await register_model(http, manifest)
                assert registered.status_code == 201, registered.text
            await models_listed(http, [m.name for m in minilm_zoo.values()], timeout=60)
            response = await http.post(
                "/v1/experiments",
                json={
                    "model": "minilm-l6",
                    "frameworks": list(frameworks),
                    "dataset": "sentences",
                    "scenario": {"iterations": 20, "min_duration_s": 0, "warmup": 2},
                },
            )
            assert response.status_code == 202, response.text
            experiment = await compared(http, response.json()["id"])

    comparison = experiment["comparison"]
    assert comparison["failures"] == []
    assert {r["framework"] for r in comparison["evaluations"]} == set(frameworks)
    for result in comparison["evaluations"]:
        assert result["latency"]["count"] == 20
        assert result["accuracy"] is None, "unlabelled texts: parity is the quality measure"
    (pair,) = comparison["parity"]
    assert pair["comparable"] is True, pair["reason"]
    assert pair["within_tolerance"] is True, pair["reason"]
    assert pair["top1_agreement"] is None
    assert pair["min_cosine"] > 0.99999
    assert comparison["parity_ok"] is True


def test_run_of_the_text_encoder_embedded_reports_embedding_parity(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path)
    result_file = tmp_path / "experiment.json"
    result = dlscope(
        environment,
        "run",
        "minilm-l6",
        "--framework",
        "onnxruntime,pytorch",
        "--dataset",
        "sentences",
        "-n",
        "20",
        "--json",
        str(result_file),
    )
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    shown = " ".join(result.stdout.split())
    assert "minilm-l6 is not built here yet: building it first (no download)" in shown
    assert "cosine >= " in shown
    assert "parity: every pair within tolerance" in shown
    comparison = json.loads(result_file.read_text())["experiment"]["comparison"]
    assert comparison["parity_ok"] is True
    (pair,) = comparison["parity"]
    assert pair["min_cosine"] > 0.99999
