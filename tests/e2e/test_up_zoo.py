"""``dlscope up --zoo FAMILIES``: the zoo's families built (where they are not yet) and
registered before the gateway serves, so the launch page and the API offer them from the
first request; a family that does not exist is refused before anything starts."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest

from harness.relay import free_port
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.zoo]


def _environment(home: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(home)
    return environment


async def test_up_builds_the_families_asked_and_serves_them_from_the_first_request(
    tmp_path: Path,
) -> None:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port), "--zoo", "digits-cnn"),
        env=_environment(tmp_path),
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def models() -> set[str] | None:
                try:
                    answer = await http.get("/v1/models")
                except httpx.HTTPError:
                    return None  # still building, or starting
                return {model["name"] for model in answer.json()}

            served = await eventually(models, timeout=240)
            assert served is not None
            # Served from its first answer: the gateway listens only once they are built.
            assert {"digits-cnn", "digits-cnn-torch", "digits-cnn-tf"} <= served
            assert (tmp_path / "zoo" / "digits-cnn.yaml").exists()
    finally:
        process.terminate()
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    said = output.decode()
    assert "digits-cnn is not built here yet: building it first (no download)" in said


async def test_up_refuses_a_family_the_zoo_does_not_have(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--zoo", "digits-cnn,llama-70b"),
        env=_environment(tmp_path),
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    said = " ".join(output.decode().split())
    assert (
        "--zoo: no family 'llama-70b'; choose from digits-cnn, minilm-l6, smollm2, or all" in said
    )
    assert not (tmp_path / "zoo").exists()  # nothing built before the refusal
