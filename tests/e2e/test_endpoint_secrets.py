"""A password in a served model's URL, and its API key, are never stored or shown: a user
runs ``dlscope run --endpoint http://user:PASS@host/v1`` against the stub (some of whose
answers fail, so that failure causes are written), against an address nobody serves, with
both a password and DLSCOPE_ENDPOINT_API_KEY (refused: both would be its Authorization
header), then serves the results with ``dlscope up`` and an endpoint worker of the stub
asked with the key.
Every stored event, every file under the home (the event store, logs, written manifests),
everything printed and every page is searched for the secrets: none holds them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from dlscope.cli.outcome import COMPLETED
from harness.openai_stub import MODEL, StubTiming, openai_stub
from harness.relay import free_port
from harness.stub_tokenizer import write_stub_tokenizer
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT
from tests.e2e.test_cli import dlscope

pytestmark = pytest.mark.e2e

PASSWORD = "pl4nted-PASSWORD-7c1e"
KEY = "pl4nted-KEY-90ad"
SECRETS = (PASSWORD, KEY)
RUN = ("-n", "4", "--warmup", "0", "--min-duration", "0", "--max-new-tokens", "4")


def with_secrets(url: str) -> str:
    """The stub's URL as a user with credentials would give it."""
    return url.replace("http://", f"http://someone:{PASSWORD}@")


def assert_nothing_holds_the_secrets(texts: dict[str, str], home: Path) -> None:
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{where} holds {secret!r}"
    for path in home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, f"{path} holds {secret!r}"


async def test_credentials_in_an_endpoint_url_reach_no_event_log_file_or_page(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    texts: dict[str, str] = {}
    # Every later completion fails with the server's error, which is quoted in the causes.
    with openai_stub(StubTiming(misbehave="nul-error", honest=3, every=2)) as (url, _):
        endpoint = with_secrets(url)
        run = dlscope(
            home,
            *("run", "--served-model", MODEL, "--tokenizer", str(tokenizer)),
            *("--endpoint", endpoint, *RUN, "--json", str(tmp_path / "run.json")),
        )
        assert run.returncode in COMPLETED, run.stdout + run.stderr
        texts["the run's output"] = run.stdout + run.stderr
        texts["the run's events"] = (tmp_path / "run.json").read_text()
        document = json.loads(texts["the run's events"])
        served = document["events"][3]["payload"]["generation"]["served"]
        assert served["url"] == url  # shown, without what it must not show
        assert served["failures"], "no cause was written: nothing was tested"

        # Nobody serves this address: the reason quotes what could not be reached.
        unreachable = endpoint.replace(url.split("/")[2], f"127.0.0.1:{free_port()}")
        served_stub = ("run", "served-stub", "--framework", "endpoint", *RUN)
        refused = dlscope(home, *served_stub, "--endpoint", unreachable)
        assert refused.returncode not in COMPLETED
        texts["the refused run's output"] = refused.stdout + refused.stderr
        assert "cannot be reached" in " ".join(texts["the refused run's output"].split())

        both = dlscope(home, *served_stub, "--endpoint", endpoint, DLSCOPE_ENDPOINT_API_KEY=KEY)
        assert both.returncode not in COMPLETED
        texts["the run with two credentials"] = both.stdout + both.stderr
        said = " ".join(texts["the run with two credentials"].split())
        assert "is given a password in its URL and an API key" in said

        texts.update(await served_pages(home, url))
    assert_nothing_holds_the_secrets(texts, home)


async def served_pages(home: Path, endpoint: str) -> dict[str, str]:
    """Every page and answer of ``dlscope up`` with an endpoint worker of ``endpoint``
    asked with the key, after one evaluation through its API, and what it logged."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(
        DLSCOPE_HOME=str(home), DLSCOPE_ENDPOINT_URL=endpoint, DLSCOPE_ENDPOINT_API_KEY=KEY
    )
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port), "-f", "endpoint"),
        env=environment,
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    texts: dict[str, str] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

            async def online() -> bool:
                try:
                    agents = (await http.get("/v1/agents")).json()
                except httpx.HTTPError:
                    return False
                return any(a.get("status") == "online" for a in agents)

            await eventually(online, timeout=120)
            asked = await http.post(
                "/v1/evaluations",
                json={
                    "model": "served-stub",
                    "framework": "endpoint",
                    "scenario": {"iterations": 4, "min_duration_s": 0, "warmup": 0},
                },
            )
            assert asked.status_code == 202, asked.text
            evaluation_id = asked.json()["id"]

            async def ended() -> bool:
                answer = (await http.get(f"/v1/evaluations/{evaluation_id}")).json()
                return answer["status"] in ("completed", "failed")

            await eventually(ended, timeout=120)
            for path in (
                "/v1/agents",
                f"/v1/evaluations/{evaluation_id}",
                f"/v1/evaluations/{evaluation_id}/events",
                "/",
                "/agents",
                "/evaluations",
                f"/evaluations/{evaluation_id}",
                "/registry",
                "/history",
            ):
                answer = await http.get(path)
                assert answer.status_code == 200, (path, answer.text)
                texts[path] = answer.text
            assert endpoint in texts["/v1/agents"]  # the endpoint is shown, without them
    finally:
        process.terminate()
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    texts["what up logged"] = output.decode()
    return texts
