"""What the browser tests share: Debian's ``chromium`` driven through Playwright (never
Playwright's own download), pages that record everything that went wrong on them (console
errors, uncaught exceptions, Content-Security-Policy violations, dialogs), and the checks
every page of the gateway must pass.

Importing this module skips the importing test module where there is no Playwright or no
Chromium, naming the reason; under ``make test`` (which installs both) each browser test fails
instead when it launches Chromium (tests/tiers.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from shared.config import REPOSITORY_ROOT
from tests.tiers import CHROMIUM_MISSING, STRICT

__all__ = [
    "ARTIFACTS",
    "CHROMIUM",
    "DOCS_IMAGES",
    "Browser",
    "charts_drawn",
    "docs_shot",
    "launch_chromium",
    "playwright_api",
    "policy_of",
    "secured",
    "shot",
]

CHROMIUM = Path(os.environ.get("DLSCOPE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("DLSCOPE_TEST_ARTIFACTS", REPOSITORY_ROOT / "build/screenshots"))
# The pictures of the UI in README.md and docs/: written by the browser tests on every run, so
# they show the pages as they are.
DOCS_IMAGES = REPOSITORY_ROOT / "docs/images"

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="the browser tests need the 'playwright' package"
)
NO_CHROMIUM = (
    f"{CHROMIUM_MISSING}{CHROMIUM}: install Debian's 'chromium' (scripts/ensure-browser.sh)"
)
HAS_CHROMIUM = CHROMIUM.exists()
if not HAS_CHROMIUM and not STRICT:
    pytest.skip(NO_CHROMIUM, allow_module_level=True)

# Runs in every document before the page's own scripts (Playwright injects it through the
# DevTools protocol, so the page's policy does not apply to it): each violation of the
# page's Content-Security-Policy is reported to the test at once, with what was blocked.
_REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.dlscopeViolation(
    `${document.location.pathname}: ${e.effectiveDirective} blocked ` +
      `${e.blockedURI || "inline"} (${e.sourceFile || "?"}:${e.lineNumber})`,
  );
});
"""


class Browser:
    """One Chromium; every page it opens records its console errors, uncaught exceptions,
    policy violations and dialogs (an ``alert`` a page should never open)."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url
        self.errors: list[str] = []
        self.violations: list[str] = []
        self.dialogs: list[str] = []
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # for the screenshots (``shot``)

    async def page(self, *, offline: bool = False, record: bool = True) -> Any:
        """A page in a fresh context. ``record=False``: its console errors are expected (a
        404 page notes its status there); violations and dialogs are recorded regardless."""
        context = await self.browser.new_context(
            viewport={"width": 1366, "height": 900}, base_url=self.base_url
        )

        def violation(text: str) -> None:
            self.violations.append(text)

        await context.expose_function("dlscopeViolation", violation)
        await context.add_init_script(script=_REPORT_VIOLATIONS)
        if offline:
            await context.set_offline(True)
        page = await context.new_page()

        async def dialog(opened: Any) -> None:
            self.dialogs.append(f"{page.url}: {opened.type} {opened.message!r}")
            await opened.dismiss()

        page.on("dialog", dialog)
        if record:
            page.on(
                "console",
                lambda m: (
                    self.errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
                ),
            )
            page.on("pageerror", lambda e: self.errors.append(f"{page.url}: {e}"))
        return page


async def launch_chromium(playwright: Any) -> Any:
    if not HAS_CHROMIUM:
        pytest.skip(NO_CHROMIUM)  # under make test, a failure (tests/tiers.py)
    return await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])


async def shot(page: Any, name: str) -> None:
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def docs_shot(page: Any, name: str) -> None:
    """The page as the docs show it (``docs/images/<name>.png``): what a screen holds of it,
    not the whole length of the page."""
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(DOCS_IMAGES / f"{name}.png"))


async def charts_drawn(page: Any) -> int:
    """Wait until dlscope.js has drawn every chart of the page; check each is a real SVG."""
    await page.wait_for_selector("body[data-charts-drawn]", timeout=30_000)
    body = page.locator("body")
    drawn = int(await body.get_attribute("data-charts-drawn") or 0)
    assert await body.get_attribute("data-charts-failed") == "0"
    specs = await page.locator("script[data-chart-for]").count()
    assert drawn == specs
    for i in range(specs):
        chart = page.locator("div.vega").nth(i)
        # vega's SVG: marks drawn (paths, rects, symbols), not an empty canvas.
        assert await chart.locator("svg.marks").count() == 1
        assert await chart.locator("svg.marks g.mark-group").count() > 0
        marks = chart.locator("svg.marks path, svg.marks rect, svg.marks line")
        assert await marks.count() > 0
    return drawn


def policy_of(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """The response's Content-Security-Policy, directive by directive."""
    policy: dict[str, list[str]] = {}
    for directive in headers["content-security-policy"].split(";"):
        name, *values = directive.split()
        policy[name.lower()] = values
    return policy


def secured(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """Check the headers every response of the gateway sends (names in lower case): a policy
    under which no inline, injected or foreign script runs, no plug-in loads, the page is in
    no frame and sends its forms nowhere else; no content sniffing; no referrer elsewhere."""
    policy = policy_of(headers)
    scripts = policy.get("script-src", policy["default-src"])
    assert scripts in (["'self'"], ["'none'"]), policy
    assert policy["default-src"] in (["'self'"], ["'none'"]), policy
    assert policy["object-src"] == ["'none'"], policy
    assert policy["base-uri"] == ["'none'"], policy
    assert policy["frame-ancestors"] == ["'none'"], policy
    assert policy["form-action"] in (["'self'"], ["'none'"]), policy
    assert not any("unsafe-eval" in v for values in policy.values() for v in values), policy
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    return policy
