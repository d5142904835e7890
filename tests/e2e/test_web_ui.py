"""The web UI as a person uses it, in a real Chromium (Debian's ``chromium`` driven through
Playwright; no browser download), against a deployment on RabbitMQ and PostgreSQL with a
worker of every CPU framework:

- launch an experiment of digits-cnn on every framework from the form (after the form has
  shown the API's 422 next to an impossible field), watch it progress until compared, open
  its page: the comparison, the charts drawn, the parity matrix;
- launch one evaluation too short to claim its percentile: its page shows the histogram and
  the verdict's reasons in words;
- the lists, registry, agents and history pages; a 404 page for an id that does not exist;
- ``dlscope report`` of the experiment: an HTML file that opens with the network cut off
  and shows every chart.

No page may log a console error, violate the gateway's Content-Security-Policy (which
allows no inline script and no eval: every chart is drawn under it) or open a dialog, and
every page answers with that policy. Screenshots of each page are saved under
``$DLSCOPE_TEST_ARTIFACTS`` (default ``build/screenshots``), and the evaluation page's, the
picture README.md and the docs show, as ``docs/images/evaluation.png``.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlscope.zoo import BuiltModel
from harness.deployment import Deployment, throwaway_deployment
from harness.waiting import models_listed
from shared.config import REPOSITORY_ROOT
from tests.conftest import POSTGRES_ADMIN_DSN, register_model, runnable
from tests.e2e.browser import (
    Browser,
    charts_drawn,
    docs_shot,
    launch_chromium,
    playwright_api,
    secured,
    shot,
)

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

# OpenCL only where its device compiles kernels here (see tests.conftest.opencl_problem).
FRAMEWORKS = runnable(("onnxruntime", "pytorch", "tensorflow", "opencl"))
# A run of 40 queries after a warm-up: enough for every chart, quick on two cores.
TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def zoo(digits_zoo: list[BuiltModel]) -> list[BuiltModel]:
    return digits_zoo


@pytest.fixture
async def deployment(rabbitmq_url: str, zoo: list[BuiltModel]) -> AsyncIterator[Deployment]:
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="ui", frameworks=FRAMEWORKS
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)
            for model in zoo:
                registered = await register_model(http, model.manifest.model_dump(mode="json"))
                assert registered.status_code == 201, registered.text

            await models_listed(http, [model.manifest.name for model in zoo], timeout=60)
        yield deployment


@pytest.fixture
async def chromium(deployment: Deployment) -> AsyncIterator[Browser]:
    async with playwright_api.async_playwright() as playwright:
        browser = await launch_chromium(playwright)
        try:
            yield Browser(browser, deployment.gateway_url)
        finally:
            await browser.close()


async def visit(page: Any, path: str) -> None:
    """Open ``path``; it answers with the gateway's policy and headers."""
    response = await page.goto(path)
    secured(await response.all_headers())


async def test_launch_follow_and_read_an_experiment_and_an_evaluation(
    deployment: Deployment, chromium: Browser, tmp_path: Path
) -> None:
    page = await chromium.page()
    await visit(page, "/launch")
    await page.select_option("#model", "digits-cnn")
    assert await page.locator("#fw-all").is_checked()
    await page.select_option("#dataset", "digits")
    await page.select_option("#split", "test")
    await page.fill("#min_duration_s", "0")
    await page.fill("#warmup", "8")

    # An impossible scenario: the API's 422 shows next to the field, and nothing starts.
    await page.fill("#iterations", "0")
    await page.click("#submit")
    error = page.locator('[data-loc="scenario.iterations"] .error-text')
    await error.wait_for(timeout=10_000)
    assert "greater than or equal to 1" in await error.inner_text()
    assert await page.get_attribute("#iterations", "aria-invalid") == "true"
    assert await page.locator("#progress").is_hidden()
    await shot(page, "launch-422")
    # Chromium logs every 4xx answer to a fetch as a console error: this one was asked for.
    expected = f"{page.url}: Failed to load resource: the server responded with a status of 422"
    assert [e for e in chromium.errors if e.startswith(expected)] != []
    chromium.errors[:] = [e for e in chromium.errors if not e.startswith(expected)]

    # Keyboard: the corrected field, then Enter submits the form.
    await page.fill("#iterations", "40")
    await page.focus("#iterations")
    await page.keyboard.press("Enter")
    await page.locator("#progress").wait_for(state="visible", timeout=10_000)
    await page.locator("#progress-members tr").first.wait_for(timeout=TIMEOUT_MS)
    await shot(page, "launch-progress")
    link = page.locator("#progress-link")
    await link.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert await page.locator("#progress-status").inner_text() == "compared"
    assert await page.locator("#progress-members tr").count() == len(FRAMEWORKS)
    await shot(page, "launch-done")
    experiment_id = (await link.get_attribute("href") or "").rsplit("/", 1)[-1]

    await link.click()
    await page.wait_for_url(re.compile(f"/experiments/{experiment_id}$"))
    assert await charts_drawn(page) >= 4  # latency and throughput bars, CDFs, parity
    rows = page.locator("#comparison tbody tr")
    assert await rows.count() == len(FRAMEWORKS)
    shown = range(len(FRAMEWORKS))
    frameworks = {(await rows.nth(i).locator("th").inner_text()).split()[0] for i in shown}
    assert frameworks == set(FRAMEWORKS)
    # Each member's verdict: 40 queries are too few to claim a p90 (64), so INVALID.
    verdicts = page.locator("#comparison .badge.INVALID, #comparison .badge.VALID")
    assert await verdicts.count() == len(FRAMEWORKS)
    matrix = page.locator("#parity-matrix tbody tr")
    assert await matrix.count() == len(FRAMEWORKS)
    pairs = len(FRAMEWORKS) * (len(FRAMEWORKS) - 1)  # every cell off the diagonal
    assert await page.locator("#parity-matrix").get_by_text("✓ within").count() == pairs
    assert await page.get_by_text("parity ok").count() == 1
    # What each member cost, beside its latency.
    header = await page.locator("#comparison thead").inner_text()
    assert "CPU per query" in header
    assert "peak memory" in header
    await shot(page, "experiment")

    # One of its members, through its link in the comparison.
    await rows.first.locator("th a").click()
    await page.wait_for_url(re.compile("/evaluations/"))
    await charts_drawn(page)
    assert await page.locator("div.vega[aria-label^='Histogram of']").count() == 1
    assert await page.get_by_role("heading", name="Verdict").count() == 1
    # No collector in this deployment: no link to a Jaeger that is not there, but what to do.
    assert await page.get_by_role("link", name="open in Jaeger").count() == 0
    assert await page.get_by_text("not exported: set DLSCOPE_OTLP_ENDPOINT").count() == 1
    await shot(page, "experiment-member")

    # One evaluation, too short to claim its p90 (64 queries): INVALID, and why, in words.
    await visit(page, "/launch")
    await page.select_option("#model", "digits-cnn")
    await page.uncheck("#fw-all")
    await page.check("input[name=framework][value=onnxruntime]")
    await page.fill("#iterations", "20")
    await page.fill("#min_duration_s", "0")
    await page.fill("#warmup", "0")
    await page.click("#submit")
    link = page.locator("#progress-link")
    await link.wait_for(state="visible", timeout=TIMEOUT_MS)
    log = await page.locator("#progress-log").inner_text()
    assert "started on" in log
    assert "completed" in log
    await link.click()
    await page.wait_for_url(re.compile("/evaluations/"))
    await charts_drawn(page)
    histogram = page.locator("div.vega[aria-label^='Histogram of 20 query latencies']")
    assert await histogram.count() == 1
    reasons = page.locator("ul.reasons li")
    assert await reasons.count() >= 1
    text = await page.locator("ul.reasons").inner_text()
    assert "too_few_queries" in text or "headline_is_bound" in text
    assert "Run more iterations" in text or "Run longer" in text
    assert await page.get_by_text("INVALID").count() >= 1
    # What it cost, beside the headline: CPU time per query and the peak memory.
    figures = page.locator("ul.kpis")
    cpu = figures.locator("li", has_text="CPU per query")
    assert re.search(r"\d ms", await cpu.locator(".value").inner_text())
    peak = figures.locator("li", has_text="peak memory")
    assert re.search(r"\d+(\.\d+)? MiB", await peak.locator(".value").inner_text())
    assert await page.get_by_role("heading", name="Cost, and the machine while timed").count() == 1
    assert await page.get_by_text("other processes", exact=True).count() == 1
    evaluation_url = page.url
    await shot(page, "evaluation")
    await docs_shot(page, "evaluation")  # README.md and docs/web-ui.md show it

    # The lists, filtered; the registry; the agents; the history.
    await visit(page, "/evaluations?framework=pytorch")
    rows = page.locator("#evaluations tbody tr")
    assert await rows.count() == 1
    assert "pytorch" in await rows.first.inner_text()
    await visit(page, "/evaluations")
    assert await page.locator("#evaluations tbody tr").count() == len(FRAMEWORKS) + 1
    await shot(page, "evaluations")
    await visit(page, "/experiments")
    assert await page.locator("#experiments tbody tr").count() == 1
    await shot(page, "experiments")
    await visit(page, "/registry")
    assert await page.locator("#registry-model").get_by_text("digits-cnn-torch").count() == 1
    await shot(page, "registry")
    await visit(page, "/agents")
    assert await page.locator("#agents tbody tr").count() == len(FRAMEWORKS)
    assert await page.locator("#agents").get_by_text("online").count() == len(FRAMEWORKS)
    await shot(page, "agents")
    await visit(page, "/history?model=digits-cnn&framework=onnxruntime&hardware=cpu")
    await charts_drawn(page)
    assert await page.locator("#history tbody tr").count() == 2
    await shot(page, "history")
    await visit(page, "/")
    await shot(page, "home")

    # Keyboard: the skip link is the first stop and lands on the content.
    await visit(page, evaluation_url)
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.className") == "skip"
    await page.keyboard.press("Enter")
    assert await page.evaluate("document.activeElement.id") == "main"

    assert chromium.errors == []

    # A page of an id that does not exist: a 404 page (its own console notes the 404).
    missing = await chromium.page(record=False)
    response = await missing.goto("/experiments/00000000-0000-0000-0000-000000000000")
    assert response.status == 404
    secured(await response.all_headers())
    assert await missing.get_by_role("heading", name="Not found").count() == 1
    await shot(missing, "not-found")

    # The report of the experiment, written by the CLI, opens with the network cut off.
    base = tmp_path / "experiment"
    written = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dlscope",
        "report",
        experiment_id,
        "-o",
        str(base),
        env={**os.environ, "DLSCOPE_GATEWAY_URL": deployment.gateway_url},
        cwd=REPOSITORY_ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(written.communicate(), timeout=300)
    assert written.returncode == 0, stderr.decode()
    for suffix in ("html", "csv", "md"):
        assert base.with_suffix(f".{suffix}").stat().st_size > 0
    report = await chromium.page(offline=True)
    requests: list[str] = []
    report.on("request", lambda r: requests.append(r.url))
    await report.goto(base.with_suffix(".html").as_uri())
    assert [url for url in requests if not url.startswith("file:")] == []
    # Per framework (latency, throughput, CDF), parity, and each member's charts.
    svgs = report.locator("figure.chart svg.marks")
    assert await svgs.count() >= 4 + len(FRAMEWORKS) * 4
    assert await report.locator("#parity-matrix").count() == 1
    await shot(report, "report")
    assert chromium.errors == []
    assert chromium.violations == []
    assert chromium.dialogs == []
