"""A sweep's page in a real Chromium, as a user reaches it: ``dlscope sweep`` of a served
model (the ground-truth stub) at three loads, then ``dlscope up`` on the same home and the
page the sweep named: its curves by load, its Pareto chart with the frontier, each load's
verdict and judgement against the bound asked, drawn under the gateway's policy; the same
loads answered by ``GET /v1/sweeps/{id}``, and each load's evaluation page linking back."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.openai_stub import MODEL, StubTiming, openai_stub
from harness.relay import free_port
from harness.stub_tokenizer import write_stub_tokenizer
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT
from tests.e2e.browser import (
    Browser,
    charts_drawn,
    docs_shot,
    launch_chromium,
    playwright_api,
    secured,
    shot,
)
from tests.e2e.test_cli import dlscope
from tests.e2e.test_web_ui_tokens import _environment

pytestmark = pytest.mark.e2e

LEVELS = ("1", "4", "16")


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    with openai_stub(StubTiming(ttft_ms=15, itl_ms=2)) as (url, _):
        yield url


async def test_a_sweeps_page_draws_its_curves_and_its_pareto_frontier(
    stub: str, tmp_path: Path
) -> None:
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    swept = dlscope(
        tmp_path,
        *("sweep", "--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", stub),
        *("--levels", ",".join(LEVELS), "-n", "16", "--min-duration", "0"),
        *("--max-new-tokens", "8", "--ttft-bound", "2000"),
        *("--json", str(tmp_path / "sweep.json")),
    )
    assert swept.returncode in (0, 3, 4), swept.stdout + swept.stderr
    sweep_id = json.loads((tmp_path / "sweep.json").read_text())["sweep_id"]
    # The sweep says where its page is.
    assert re.search(
        rf"sweep {sweep_id}: its curves and Pareto chart at \S+/sweeps/{sweep_id}",
        " ".join(swept.stdout.split()),
    )

    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port)),
        env=_environment(tmp_path),
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:

            async def answered() -> httpx.Response | None:
                try:
                    return await http.get(f"/v1/sweeps/{sweep_id}")
                except httpx.HTTPError:
                    return None

            found = await eventually(answered, timeout=120)
            assert found is not None
            assert found.status_code == 200, found.text
            sweep = found.json()
            counted = [load for load in sweep["loads"] if not load["superseded"]]
            assert sorted(load["level"] for load in counted) == [float(n) for n in LEVELS]
            assert sweep["over"] == "streams"
            assert sweep["bounds"] == {"ttft_ms": 2000.0}
            assert any(load["pareto"] for load in counted)
            assert (
                await http.get(f"/v1/sweeps/{'0' * 8}-0000-0000-0000-{'0' * 12}")
            ).status_code == 404

        async with playwright_api.async_playwright() as playwright:
            browser = await launch_chromium(playwright)
            try:
                await _read_the_sweep(Browser(browser, base), sweep_id, counted)
            finally:
                await browser.close()
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def _read_the_sweep(chromium: Browser, sweep_id: str, counted: list[dict[str, Any]]) -> None:
    page = await chromium.page()
    response = await page.goto(f"/sweeps/{sweep_id}")
    secured(await response.all_headers())
    heading = " ".join((await page.locator("h1").inner_text()).split())
    assert heading == "served-stub on endpoint (cpu) across concurrent streams"
    assert await charts_drawn(page) == 3
    labels = [
        await page.locator("div.vega").nth(i).get_attribute("aria-label") or "" for i in range(3)
    ]
    assert labels[0].startswith("Output tokens per second at each load")
    assert labels[1].startswith("p99 time to first token and time per output token")
    assert labels[2].startswith("Pareto chart: whole-system output tokens per second")
    rows = page.locator("#sweep-loads tbody tr:not(.superseded)")
    assert await rows.count() == len(LEVELS)
    table = " ".join((await page.locator("#sweep-loads").inner_text()).split())
    assert "on the frontier" in table
    # Each load judged against the bound asked, in the sweep's own words.
    assert all(load["judgement"] in table for load in counted)
    await shot(page, "sweep")
    await docs_shot(page, "sweep")
    # A load's evaluation page links back to its sweep.
    await rows.first.locator("a").click()
    await page.wait_for_selector("dt:text('sweep')")
    assert await page.locator(f"a[href='/sweeps/{sweep_id}']").count() == 1
    assert chromium.errors == []
    assert chromium.violations == []
    assert chromium.dialogs == []
