"""The web UI and the reports at scale, on RabbitMQ + PostgreSQL with the gateway, analyzer
and recorder as their own processes:

- an evaluation page of a run with 100 000 stored latencies: the gateway's answer (HTML, the
  analyzer drawing the figures from the stored raw latencies), and in Chromium the first
  contentful paint and the moment every chart is drawn;
- the evaluations list with 10 000 evaluations stored: the first page and the last;
- the report of that evaluation (HTML with every chart rendered to SVG, CSV, Markdown).

The events are appended to the store directly (exactly what the recorder would store), so
the measurement is of reading and drawing, not of running 10 000 evaluations. Needs
Debian's ``chromium`` for the browser figures (skipped, and said so, without it).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import POSTGRES_ADMIN_DSN, RABBITMQ_URL, percentiles
from harness.deployment import Deployment, throwaway_deployment
from harness.waiting import eventually
from services.analyzer.summary import summarize
from shared.eventstore import EventStore
from shared.measurement import ScenarioResult, TimedPhase
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.warmup import WarmupReport
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationStarted,
    Payload,
    Scenario,
    evaluation_stream,
)

__all__ = ["run"]

CHROMIUM = Path(os.environ.get("DLSCOPE_CHROMIUM", "/usr/bin/chromium"))
# Read once, at import: whether the browser figures can be taken at all.
HAS_CHROMIUM = CHROMIUM.exists()
LATENCIES = 100_000
EVALUATIONS = 10_000
REPEATS = 10
ENVIRONMENT = {
    "host": "bench",
    "cpu_model": "bench CPU",
    "framework_version": "1.31.1",
    "python": "3.11",
}


async def run(
    latencies: int = LATENCIES, evaluations: int = EVALUATIONS, *, repeats: int = REPEATS
) -> dict[str, Any]:
    """A run of ``latencies`` stored latencies and a list of ``evaluations`` (at least the
    50 of a page), each page read ``repeats`` times (the reports half as often)."""
    async with throwaway_deployment(RABBITMQ_URL, POSTGRES_ADMIN_DSN, prefix="uib") as deployment:
        big, listed = await _store(deployment, latencies, evaluations)
        for service in ("recorder", "analyzer", "gateway"):
            deployment.start(service)
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=120) as http:
            await eventually(lambda: _ready(http), timeout=60)
            result: dict[str, Any] = {
                "stored": {"latencies": latencies, "evaluations": listed},
                "server": await _server(http, big, listed, repeats),
            }
            result["browser"] = await _browser(deployment.gateway_url, big, repeats)
        return result


async def _ready(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


def _wrap(payload: Payload, evaluation_id: uuid.UUID) -> Envelope:
    return Envelope.wrap(
        payload, stream_id=evaluation_stream(evaluation_id), correlation_id=evaluation_id
    )


def _measured(evaluation_id: uuid.UUID, latencies_ns: np.ndarray) -> EvaluationMeasured:
    scenario = Scenario(iterations=len(latencies_ns), min_duration_s=0)
    warmup = WarmupReport(
        latencies_ns=tuple(int(v) for v in latencies_ns[:64]),
        window_queries=32,
        window_medians_ns=(float(np.median(latencies_ns[:32])),),
        threshold=0.05,
        steady=True,
        decided_by="steady",
        duration_ns=int(latencies_ns[:64].sum()),
    )
    phase = TimedPhase(
        samples_per_query=1,
        first_query_ns=int(latencies_ns[0] * 20),
        warmup=warmup,
        latencies_ns=tuple(int(v) for v in latencies_ns),
        duration_ns=int(latencies_ns.sum()),
        overhead=HarnessOverhead(per_query_ns=1_000.0, timer_floor_ns=100.0, method="bench"),
        stopped_by="minimums",
    )
    return EvaluationMeasured(
        evaluation_id=evaluation_id,
        agent_id="bench",
        scenario=scenario,
        load_ns=5_000_000,
        run=ScenarioResult(scenario=scenario.measurement(), sample_count=100, phases=(phase,)),
    )


def _lifecycle(evaluation_id: uuid.UUID, measured: EvaluationMeasured) -> list[Envelope]:
    return [
        _wrap(
            EvaluationRequested(
                evaluation_id=evaluation_id, model="bench-model", framework="onnxruntime"
            ),
            evaluation_id,
        ),
        _wrap(
            EvaluationStarted(
                evaluation_id=evaluation_id, agent_id="bench", host="bench", environment=ENVIRONMENT
            ),
            evaluation_id,
        ),
        _wrap(measured, evaluation_id),
        _wrap(
            EvaluationCompleted(evaluation_id=evaluation_id, result=summarize(measured)),
            evaluation_id,
        ),
    ]


async def _store(deployment: Deployment, latencies: int, evaluations: int) -> tuple[uuid.UUID, int]:
    """One evaluation of ``latencies`` latencies (100 000), and ``evaluations`` small ones
    for the list (10 000)."""
    rng = np.random.default_rng(0)
    async with EventStore.from_url(deployment.database_url) as store:
        big = uuid.uuid4()
        drawn = (rng.lognormal(np.log(2e6), 0.15, latencies)).astype(np.int64)
        await store.append(_lifecycle(big, _measured(big, drawn)))
        # Small runs for the list: what a list row shows is the same whatever the run's size.
        small = _measured(uuid.uuid4(), rng.lognormal(np.log(2e6), 0.15, 64).astype(np.int64))
        batch: list[Envelope] = []
        for _ in range(evaluations - 1):
            key = uuid.uuid4()
            batch += _lifecycle(key, small.model_copy(update={"evaluation_id": key}))
            if len(batch) >= 2000:
                await store.append(batch)
                batch = []
        if batch:
            await store.append(batch)
    return big, evaluations


async def _timed(http: httpx.AsyncClient, path: str, repeats: int = REPEATS) -> dict[str, Any]:
    times = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        response = await http.get(path, headers={"accept": "text/html"})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        size = len(response.content)
    return {**percentiles(times), "bytes": size}


async def _server(
    http: httpx.AsyncClient, big: uuid.UUID, listed: int, repeats: int
) -> dict[str, Any]:
    last = (listed // 50 - 1) * 50
    reports = max(1, repeats // 2)
    report = f"/v1/evaluations/{big}/report"
    return {
        "evaluation_page": await _timed(http, f"/evaluations/{big}", repeats),
        "figures_json": await _timed(http, f"/v1/evaluations/{big}/figures", repeats),
        "list_first_page": await _timed(http, "/evaluations?limit=50", repeats),
        "list_last_page": await _timed(http, f"/evaluations?limit=50&offset={last}", repeats),
        "list_filtered": await _timed(
            http, "/evaluations?limit=50&framework=onnxruntime&status=completed", repeats
        ),
        "report_html": await _timed(http, report, reports),
        "report_csv": await _timed(http, f"{report}?format=csv", reports),
        "report_md": await _timed(http, f"{report}?format=md", reports),
    }


async def _browser(base_url: str, big: uuid.UUID, repeats: int) -> dict[str, Any]:
    if not HAS_CHROMIUM:
        return {"skipped": f"no Chromium at {CHROMIUM}"}
    from playwright.async_api import async_playwright

    figures: dict[str, list[float]] = {"evaluation_fcp_ms": [], "evaluation_charts_ms": []}
    figures |= {"list_fcp_ms": [], "list_loaded_ms": []}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox"]
        )
        try:
            for _ in range(repeats):
                page = await browser.new_page(viewport={"width": 1366, "height": 900})
                await page.goto(f"{base_url}/evaluations/{big}")
                await page.wait_for_selector("body[data-charts-drawn]", timeout=60_000)
                figures["evaluation_fcp_ms"].append(await _first_paint(page))
                drawn = await page.get_attribute("body", "data-charts-drawn-ms")
                figures["evaluation_charts_ms"].append(float(drawn or "nan"))
                await page.goto(f"{base_url}/evaluations?limit=50")
                await page.wait_for_load_state("load")
                figures["list_fcp_ms"].append(await _first_paint(page))
                figures["list_loaded_ms"].append(
                    await page.evaluate(
                        "performance.getEntriesByType('navigation')[0].loadEventEnd"
                    )
                )
                await page.close()
        finally:
            await browser.close()
    return {name: percentiles(values) for name, values in figures.items()}


async def _first_paint(page: Any) -> float:
    # The paint entry is recorded shortly after the paint itself, possibly after "load". The
    # wait is a promise the page resolves, not wait_for_function: that one builds its
    # predicate with eval, which the pages' Content-Security-Policy (script-src 'self') refuses.
    value = await page.evaluate(FIRST_PAINT, 10_000)
    return float("nan") if value is None else float(value)


FIRST_PAINT = """(limit) => new Promise((resolve) => {
    const entry = () => performance.getEntriesByName('first-contentful-paint')[0];
    if (entry()) { resolve(entry().startTime); return; }
    const observer = new PerformanceObserver(() => {
        if (entry()) { observer.disconnect(); resolve(entry().startTime); }
    });
    observer.observe({ type: 'paint', buffered: true });
    setTimeout(() => { observer.disconnect(); resolve(entry()?.startTime ?? null); }, limit);
})"""
