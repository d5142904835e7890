"""A language model's evaluation page in a real Chromium: the token latencies with their
definitions, the TTFT/TPOT/ITL CDFs and the tokens-over-time chart, drawn under the gateway's
Content-Security-Policy; and the same model served by llama.cpp's server, measured by an
endpoint worker, whose page says its times are chunks' and how many requests failed. The
model is built by the zoo into a home (``smollm2_home``; at 650 MB it is past what one upload
to a gateway carries), then ``dlscope up`` serves that home over HTTP."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.llama_server import KEY
from harness.relay import free_port
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT
from tests.e2e.browser import Browser, charts_drawn, launch_chromium, playwright_api, secured, shot

pytestmark = pytest.mark.e2e


def _environment(home: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(home)
    return environment


async def _completed(http: httpx.AsyncClient, evaluation_id: str) -> dict[str, Any]:
    async def settled() -> dict[str, Any] | None:
        found: dict[str, Any] = (await http.get(f"/v1/evaluations/{evaluation_id}")).json()
        return found if found["status"] in ("completed", "failed") else None

    evaluation = await eventually(settled, timeout=240)
    assert evaluation is not None
    return evaluation


async def _evaluated(http: httpx.AsyncClient, framework: str, **scenario: Any) -> str:
    response = await http.post(
        "/v1/evaluations",
        json={
            "model": "smollm2",
            "framework": framework,
            "scenario": {
                "iterations": 6,
                "min_duration_s": 0,
                "warmup": 2,
                "max_new_tokens": 8,
                **scenario,
            },
        },
    )
    assert response.status_code == 202, response.text
    evaluation_id: str = response.json()["id"]
    evaluation = await _completed(http, evaluation_id)
    assert evaluation["status"] == "completed", evaluation["error"]
    assert evaluation["result"]["generation"]["requests"] == 6
    return evaluation_id


@pytest.mark.server
async def test_a_generation_page_shows_its_token_latencies_and_charts(
    smollm2_home: Path, llama_url: str
) -> None:
    await _pages(smollm2_home, llama_url)


async def _pages(home: Path, served_at: str) -> None:
    environment = _environment(home)
    environment.update(DLSCOPE_ENDPOINT_URL=served_at, DLSCOPE_ENDPOINT_API_KEY=KEY)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port)),
        *("--framework", "onnxruntime,endpoint"),
        env=environment,
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:

            async def listening() -> bool | None:
                try:
                    agents = (await http.get("/v1/agents")).json()
                except httpx.HTTPError:
                    return None
                return True if any(a["status"] == "online" for a in agents) else None

            assert await eventually(listening, timeout=120)
            in_process = await _evaluated(http, "onnxruntime")
            served = await _evaluated(http, "endpoint")
            # LoadGen's server scenario with token latencies, against a TTFT bound of 1 ms
            # that no prefill meets: LoadGen's own INVALID, in its words, on the page.
            by_loadgen = await _evaluated(
                http,
                "onnxruntime",
                name="server",
                driver="loadgen",
                target_qps=20.0,
                ttft_bound_ms=1.0,
                slo_percentile=0.5,
            )

            async with playwright_api.async_playwright() as playwright:
                browser = await launch_chromium(playwright)
                try:
                    await _read_the_page(Browser(browser, base), in_process)
                    await _read_the_served_page(Browser(browser, base), served)
                    await _read_the_loadgen_page(Browser(browser, base), by_loadgen)
                    await _launch_a_drawn_workload(Browser(browser, base))
                finally:
                    await browser.close()
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def _read_the_page(chromium: Browser, evaluation_id: str) -> None:
    page = await chromium.page()
    response = await page.goto(f"/evaluations/{evaluation_id}")
    secured(await response.all_headers())
    # A language model's page leads with what its users read first.
    kpis = [" ".join(t.split()) for t in await page.locator("ul.kpis .label").all_inner_texts()]
    assert kpis[:3] == ["TTFT p50 / p99", "TPOT p50 / p99", "output tokens/s"], kpis
    assert "requests/s" in kpis  # no bound was asked, so no goodput
    assert not any("latency (95% interval)" in label for label in kpis), kpis
    tokens = page.locator("section", has=page.locator("h2", has_text="Tokens"))
    await tokens.wait_for()
    text = " ".join((await tokens.inner_text()).split())
    assert "6 timed requests" in text
    assert "output tokens/s" in text
    for metric in ("TTFT", "TPOT", "ITL", "E2E"):
        assert await tokens.locator("th[scope=row]", has_text=metric).count() == 1
    assert "time to first token: first token's time - the request's scheduled time" in text
    drawn = await charts_drawn(page)
    assert await tokens.locator("div.vega").count() == 2
    assert drawn >= 2
    labels = [
        await tokens.locator("div.vega").nth(i).get_attribute("aria-label") or "" for i in range(2)
    ]
    assert any("time to first token" in label for label in labels), labels
    assert any("Tokens generated over time" in label for label in labels), labels
    await shot(page, "evaluation-tokens")
    assert chromium.errors == []
    assert chromium.violations == []
    assert chromium.dialogs == []


async def _read_the_served_page(chromium: Browser, evaluation_id: str) -> None:
    page = await chromium.page()
    await page.goto(f"/evaluations/{evaluation_id}")
    tokens = page.locator("section", has=page.locator("h2", has_text="Tokens"))
    await tokens.wait_for()
    text = " ".join((await tokens.inner_text()).split())
    assert "Served: its times are the server's chunks" in text
    assert "Failed requests, never latency samples: none." in text
    assert "time to first token: the first chunk with content's arrival" in text
    assert "inter-chunk latency" in text
    await shot(page, "evaluation-tokens-served")
    assert chromium.errors == []
    assert chromium.violations == []


async def _read_the_loadgen_page(chromium: Browser, evaluation_id: str) -> None:
    page = await chromium.page()
    await page.goto(f"/evaluations/{evaluation_id}")
    verdict = page.locator("section", has=page.locator("h2", has_text="Verdict"))
    await verdict.wait_for()
    text = " ".join((await verdict.inner_text()).split())
    assert "LoadGen's own result is INVALID, with p50 TTFT" in text
    assert "TTFT constrain not met" in text
    # dlscope's record of the same requests' tokens draws the token charts.
    tokens = page.locator("section", has=page.locator("h2", has_text="Tokens"))
    assert "6 timed requests" in " ".join((await tokens.inner_text()).split())
    assert await tokens.locator("div.vega").count() == 2
    await charts_drawn(page)
    await shot(page, "evaluation-tokens-loadgen")
    assert chromium.errors == []
    assert chromium.violations == []


async def _launch_a_drawn_workload(chromium: Browser) -> None:
    # The launch form's text-generation fields, shown for a language model: a bad length
    # distribution is refused at its field before anything is sent; a good one launches, and
    # the result says the workload it ran.
    page = await chromium.page()
    await page.goto("/launch")
    await page.select_option("#model", "smollm2")
    assert await page.locator("#generation").is_visible()
    await page.uncheck("#fw-all")
    await page.check("input[name=framework][value=onnxruntime]")
    await page.fill("#iterations", "6")
    await page.fill("#warmup", "2")
    await page.fill("#min_duration_s", "0")
    await page.fill("#output_tokens", "uniform:5-2")
    await page.click("#submit")
    error = page.locator('[data-loc="scenario.output_tokens"] .error-text')
    await error.wait_for(timeout=30_000)  # the API's 422: min exceeds max
    assert "min (5) exceeds max (2)" in await error.inner_text()
    assert await page.locator("#progress").is_hidden()
    expected = f"{page.url}: Failed to load resource: the server responded with a status of 422"
    chromium.errors[:] = [e for e in chromium.errors if not e.startswith(expected)]
    await page.fill("#output_tokens", "uniform:2 to 5")
    await page.click("#submit")
    local = page.locator('[data-loc="scenario.output_tokens"] .error-text')
    await local.wait_for(timeout=10_000)
    assert "not a length distribution" in await local.inner_text()
    await page.fill("#output_tokens", "uniform:2-5")
    await page.fill("#input_tokens", "12")
    await shot(page, "launch-generation")
    await page.click("#submit")
    link = page.locator("#progress-link")
    await link.wait_for(state="visible", timeout=240_000)
    assert await page.locator("#progress-status").inner_text() == "completed"
    await link.click()
    about = page.locator("section", has=page.locator("h2", has_text="What ran"))
    await about.wait_for()
    text = " ".join((await about.inner_text()).split())
    assert "prompts of 12, outputs of uniform 2-5 tokens, seeded" in text
    assert chromium.errors == []
    assert chromium.violations == []
