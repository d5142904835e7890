"""A language model on a deployment of separate services over RabbitMQ and PostgreSQL: the
same generation, token times and summary through the HTTP API and through a message
published straight to the broker (``dlscope publish``)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.deployment import throwaway_deployment
from harness.waiting import evaluation_outcome, models_listed
from shared.config import REPOSITORY_ROOT
from shared.manifests import ModelManifest
from tests.conftest import POSTGRES_ADMIN_DSN

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

SCENARIO = {"iterations": 3, "min_duration_s": 0, "warmup": 1, "max_new_tokens": 4}


@pytest.fixture
def smollm2(smollm2_zoo: dict[str, ModelManifest]) -> ModelManifest:
    return smollm2_zoo["onnxruntime"]


def _generated(evaluation: dict[str, Any]) -> dict[str, Any]:
    assert evaluation["status"] == "completed", evaluation["error"]
    generation: dict[str, Any] = evaluation["result"]["generation"]
    assert generation["requests"] == 3
    assert generation["output_tokens_mean"] == 4
    assert generation["ttft"]["count"] == 3
    assert generation["tpot"]["count"] == 3
    return generation


async def test_a_generation_runs_the_same_over_http_and_straight_from_the_broker(
    rabbitmq_url: str, smollm2: ModelManifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 650 MB is past what one upload carries: the registry reads the files where the zoo
    # wrote them, a folder its operator lists.
    monkeypatch.setenv("DLSCOPE_REGISTRY_SOURCE_ROOTS", str(Path(smollm2.source.uri).parent))
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="llm", frameworks=("onnxruntime",)
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)
            registered = await http.post("/v1/models", json=smollm2.model_dump(mode="json"))
            assert registered.status_code == 201, registered.text
            await models_listed(http, ["smollm2"], timeout=60)

            response = await http.post(
                "/v1/evaluations",
                json={"model": "smollm2", "framework": "onnxruntime", "scenario": SCENARIO},
            )
            assert response.status_code == 202, response.text
            over_http = _generated(
                await evaluation_outcome(http, response.json()["id"], timeout=240)
            )

            published = await asyncio.to_thread(
                subprocess.run,
                [
                    *(sys.executable, "-m", "dlscope", "publish", "smollm2", "-n", "3"),
                    *("--min-duration", "0", "--warmup", "1", "--max-new-tokens", "4"),
                ],
                env=deployment.environment,
                cwd=REPOSITORY_ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert published.returncode == 0, published.stderr
            found = re.search(r"published evaluation ([0-9a-f-]{36})", published.stdout)
            assert found is not None, published.stdout
            from_broker = _generated(await evaluation_outcome(http, found.group(1), timeout=240))

            events = (await http.get(f"/v1/evaluations/{found.group(1)}/events")).json()
            (measured,) = [e for e in events if e["type"] == "evaluation.measured"]
            requests = measured["payload"]["generation"]["requests"]
            assert [len(r["token_ns"]) for r in requests] == [4, 4, 4]

    assert over_http["definitions"] == from_broker["definitions"]
