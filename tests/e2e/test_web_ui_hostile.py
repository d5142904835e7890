"""Data never changes a page: a model registered with markup in every free-text field (its
task opens an HTML comment and a script, its description closes the script element, its
licence breaks out of an attribute) is shown as text on every page, in a real Chromium,
against a deployment on RabbitMQ and PostgreSQL with an onnxruntime worker:

- the launch form still fills (the model and its versions can be chosen) and launches it;
- its evaluation's page draws every chart, under the gateway's Content-Security-Policy
  (no inline or foreign script, no ``eval``: Vega runs its expression interpreter);
- no page opens a dialog, logs an error or violates its policy, and every response carries
  the policy, ``nosniff`` and the framing and referrer headers; the HTML report too;
- the launch page shows no progress step after the measurement, whatever order a stream
  sends them in, and stops following an id the gateway does not know.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from harness.deployment import Deployment, throwaway_deployment
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT
from tests.conftest import POSTGRES_ADMIN_DSN
from tests.e2e.browser import (
    Browser,
    charts_drawn,
    launch_chromium,
    playwright_api,
    policy_of,
    secured,
    shot,
)

pytestmark = [pytest.mark.e2e, pytest.mark.rabbitmq, pytest.mark.postgres]

HOSTILE = "hostile-squeezenet"
SCRIPT = "</script><script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'
COMMENT = "<!--<script>"
TIMEOUT_MS = 120_000


def hostile_manifest(version: str) -> dict[str, Any]:
    """squeezenet's manifest (its file ships with onnx, so the model runs), renamed, with
    markup in every field a person reads."""
    manifest: dict[str, Any] = yaml.safe_load(
        (REPOSITORY_ROOT / "manifests" / "models" / "squeezenet.yaml").read_text()
    )
    manifest.update(
        name=HOSTILE,
        version=version,
        task=COMMENT,
        description=f"{SCRIPT} {ATTRIBUTE} {COMMENT} \u2028\u2029 [x](javascript:alert(1))",
        license=ATTRIBUTE,
        references=["javascript:alert(1)", SCRIPT],
        attributes={**manifest["attributes"], "note": SCRIPT + ATTRIBUTE},
    )
    return manifest


@pytest.fixture
async def deployment(rabbitmq_url: str) -> AsyncIterator[Deployment]:
    async with throwaway_deployment(
        rabbitmq_url, POSTGRES_ADMIN_DSN, prefix="uih", frameworks=("onnxruntime",)
    ) as deployment:
        deployment.start_all()
        async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=60) as http:
            await deployment.ready(http)
            for version in ("1.0.0", "1.0.1"):
                registered = await http.post("/v1/models", json=hostile_manifest(version))
                assert registered.status_code == 201, registered.text
            deprecated = await http.post(
                f"/v1/models/{HOSTILE}/1.0.0/deprecate",
                json={"reason": f"{SCRIPT} {ATTRIBUTE} {COMMENT}"},
            )
            assert deprecated.status_code == 204, deprecated.text

            async def listed() -> bool:
                # 404 until the recorder has stored the first registration.
                response = await http.get(f"/v1/models/{HOSTILE}")
                if response.status_code == 404:
                    return False
                versions = response.json()
                return any(v.get("deprecated") for v in versions) and len(versions) == 2

            await eventually(listed, timeout=60)
        yield deployment


@pytest.fixture
async def chromium(deployment: Deployment) -> AsyncIterator[Browser]:
    async with playwright_api.async_playwright() as playwright:
        browser = await launch_chromium(playwright)
        try:
            yield Browser(browser, deployment.gateway_url)
        finally:
            await browser.close()


async def visit(page: Any, path: str, status: int = 200) -> None:
    """Open ``path``: its answer carries the headers, and nothing from the data became an
    element or an attribute of the page."""
    response = await page.goto(path)
    assert response.status == status, path
    secured(await response.all_headers())
    await page.wait_for_load_state("load")
    assert await page.locator("img[src=x], [onerror]").count() == 0, path


async def test_markup_in_a_manifest_is_shown_as_text_on_every_page(
    deployment: Deployment, chromium: Browser
) -> None:
    page = await chromium.page()

    # The launch form fills from the catalog embedded in the page: the model, its versions.
    await visit(page, "/launch")
    await page.select_option("#model", HOSTILE)
    versions = await page.locator("#version option").all_inner_texts()
    assert sorted(versions) == ["1.0.0 (deprecated)", "1.0.1", "latest (*)"]
    await shot(page, "hostile-launch")

    # ... and launches it: followed live until it completes, then its page and charts.
    await page.uncheck("#fw-all")
    await page.check("input[name=framework][value=onnxruntime]")
    await page.fill("#iterations", "20")
    await page.fill("#min_duration_s", "0")
    await page.fill("#warmup", "4")
    await page.click("#submit")
    link = page.locator("#progress-link")
    await link.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert await page.locator("#progress-status").inner_text() == "completed"
    log = (await page.locator("#progress-log").inner_text()).splitlines()
    measured = next(i for i, line in enumerate(log) if "measured" in line)
    # No step of the run is shown after its measurement (they travel apart from the events).
    assert all("completed" in line for line in log[measured + 1 :]), log
    evaluation = (await link.get_attribute("href") or "").rsplit("/", 1)[-1]
    await link.click()
    await page.wait_for_url(re.compile(f"/evaluations/{evaluation}$"))
    response = await page.reload()
    secured(await response.all_headers())
    assert await charts_drawn(page) >= 3
    await shot(page, "hostile-evaluation")

    # The registry shows the markup as the text it is.
    await visit(page, "/registry")
    registry = page.locator("#registry-model")
    assert await registry.get_by_text(COMMENT, exact=True).count() == 2  # each version's task
    assert await registry.get_by_text(SCRIPT, exact=False).count() >= 1
    await shot(page, "hostile-registry")

    for path in ("/", "/evaluations", "/experiments", "/agents", f"/evaluations?model={HOSTILE}"):
        await visit(page, path)
    await visit(page, f"/history?model={HOSTILE}&framework=onnxruntime&hardware=cpu")
    assert await charts_drawn(page) >= 1

    # The report, as the gateway serves it: no script at all, its inline styles allowed.
    report = await chromium.page()
    response = await report.goto(f"/v1/evaluations/{evaluation}/report")
    policy = secured(await response.all_headers())
    assert policy["default-src"] == ["'none'"]
    assert "script-src" not in policy
    assert await report.locator("figure.chart svg.marks").count() >= 3

    assert chromium.errors == []
    assert chromium.violations == []
    assert chromium.dialogs == []

    # A page that is not there: its console notes the 404; no violation, no dialog.
    missing = await chromium.page(record=False)
    await visit(missing, "/evaluations/00000000-0000-0000-0000-000000000000", status=404)
    assert chromium.violations == []


async def test_every_response_carries_the_policy(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.gateway_url, timeout=30) as http:
        for path in (
            "/v1/models",
            f"/v1/models/{HOSTILE}",
            "/v1/nowhere",
            "/static/dlscope.js",
            "/static/vendor/vega.min.js",
            "/openapi.json",
            "/healthz",
        ):
            secured((await http.get(path)).headers)
        # The API's own documentation pages load Swagger UI from its CDN: the policy names
        # that origin and the hashes of the page's own inline script, no more.
        docs = await http.get("/docs")
        assert docs.status_code == 200
        policy = policy_of(docs.headers)
        assert "'unsafe-inline'" not in policy["script-src"]
        assert docs.headers["x-content-type-options"] == "nosniff"
        assert policy["frame-ancestors"] == ["'none'"]


def sse(event: str, data: dict[str, Any], version: int | None = None) -> str:
    head = "" if version is None else f"id: {version}\n"
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


async def launch_one(page: Any, answer: dict[str, Any], stream: str) -> list[str]:
    """Launch an evaluation from the form, the gateway's answer to it and its event stream
    being ``answer`` and ``stream``; the URLs of the stream the page asked for."""
    asked: list[str] = []

    async def accepted(route: Any) -> None:
        await route.fulfill(status=202, json=answer)

    async def events(route: Any) -> None:
        asked.append(route.request.url)
        await route.fulfill(status=200, content_type="text/event-stream", body=stream)

    await page.route("**/v1/evaluations", accepted)
    await page.route(f"**/v1/evaluations/{answer['id']}/events", events)
    await visit(page, "/launch")
    await page.uncheck("#fw-all")
    await page.check("input[name=framework][value=onnxruntime]")
    await page.click("#submit")
    return asked


async def test_the_launch_page_never_shows_a_step_after_its_measurement(
    deployment: Deployment, chromium: Browser
) -> None:
    """Whatever the stream says, the page shows no step after the measurement; and it stops
    following an id the gateway says is not an evaluation, instead of asking again."""
    page = await chromium.page()
    evaluation = str(uuid.uuid4())
    answer = {"id": evaluation, "trace_id": "0" * 32, "trace_url": "http://jaeger/trace/0"}
    stored = [
        ("evaluation.requested", {"model": HOSTILE, "framework": "onnxruntime"}),
        ("evaluation.scheduled", {"model_version": "1.0.1"}),
        ("evaluation.started", {"agent_id": "worker-1", "host": "host-1"}),
        ("evaluation.measured", {}),
        ("evaluation.completed", {"result": {"p90_ms": 1.5}}),
    ]
    frames = [sse(t, {"type": t, "payload": p}, v) for v, (t, p) in enumerate(stored, 1)]
    step = {"phase": "running the scenario", "part": "timed queries", "expected_s": 1.0}
    late = {"phase": "running the scenario", "part": "a stale step", "expected_s": 1.0}
    frames.insert(3, sse("evaluation.progress", step))
    frames.insert(5, sse("evaluation.progress", late))  # after the measurement
    await launch_one(page, answer, "".join(frames))
    await page.locator("#progress-link").wait_for(state="visible", timeout=10_000)
    log = await page.locator("#progress-log").inner_text()
    assert "timed queries, about 1.0 s" in log
    assert "a stale step" not in log

    unknown = {**answer, "id": str(uuid.uuid4())}
    problem = {"status": 404, "detail": f"no evaluation {unknown['id']}"}
    page = await chromium.page()
    asked = await launch_one(page, unknown, sse("error", problem))
    await page.get_by_text(f"not followed: no evaluation {unknown['id']}").wait_for()
    await page.wait_for_timeout(4_000)  # EventSource would ask again after 3 s
    assert len(asked) == 1
    assert chromium.errors == []
    assert chromium.violations == []
