"""Secure by default, as an operator and a user meet it: without a token the gateway listens
on loopback only (elsewhere only on the operator's explicit, logged opt-in); with one, writes
and reads alike need it (reads unless the operator opens them), a browser signs in once for a
session cookie, and nothing a token guards is shown to whoever lacks it."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from dlscope.embedded import all_services
from shared.config import Settings
from shared.errors import ConfigurationError
from shared.messaging import create_broker
from shared.runtime import Runtime, running
from shared.telemetry import Telemetry
from tests.integration.conftest import STACKS, Stack, stack_settings, started_stack

TOKEN = "correct horse battery staple"


async def test_without_a_token_the_gateway_will_not_listen_beyond_loopback(
    tmp_path: Path, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(home=tmp_path, namespace=namespace)
    runtime = Runtime(settings, Telemetry.create(settings, "test"), create_broker("memory://"))
    try:
        with pytest.raises(ConfigurationError, match="DLSCOPE_API_TOKEN") as refused:
            async with running(all_services(runtime, [], gateway=("0.0.0.0", 0))):
                pass
        assert "would listen on 0.0.0.0" in str(refused.value)
    finally:
        await runtime.close()

    opened = Settings(home=tmp_path, namespace=namespace, allow_unauthenticated=True)
    runtime = Runtime(opened, Telemetry.create(opened, "test"), create_broker("memory://"))
    try:
        with caplog.at_level(logging.WARNING):
            async with running(all_services(runtime, [], gateway=("0.0.0.0", 0))):
                pass
        assert "the gateway listens on 0.0.0.0 with no token" in caplog.text
    finally:
        await runtime.close()


@pytest.fixture(params=STACKS)
async def guarded(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str
) -> AsyncIterator[Stack]:
    """A deployment with an API token; its client sends it."""
    settings = stack_settings(request, tmp_path, namespace, api_token=TOKEN)
    async with started_stack(settings, embedded=request.param == "embedded") as stack:
        yield stack


def anonymous(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.http.base_url, timeout=30)


async def test_with_a_token_reads_and_writes_need_it(guarded: Stack) -> None:
    async with anonymous(guarded) as http:
        for path in ("/v1/evaluations", "/v1/models", "/v1/models/squeezenet/1.0.1", "/v1/agents"):
            response = await http.get(path)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
            assert "squeezenet" not in response.text
        wrong = await http.get("/v1/models", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        write = await http.post("/v1/evaluations", json={"model": "squeezenet"})
        assert write.status_code == 401
        for open_path in ("/healthz", "/readyz", "/openapi.json", "/static/dlscope.css"):
            assert (await http.get(open_path)).status_code == 200, open_path
    assert (await guarded.http.get("/v1/models")).status_code == 200  # bearer: the token


async def test_a_browser_signs_in_once_and_reads_the_pages(guarded: Stack) -> None:
    page = {"accept": "text/html"}
    async with anonymous(guarded) as http:
        sent = await http.get("/evaluations?status=completed", headers=page)
        assert sent.status_code == 303
        assert sent.headers["location"] == "/signin?next=/evaluations%3Fstatus%3Dcompleted"
        form = await http.get("/signin", headers=page)
        assert form.status_code == 200
        assert 'name="token"' in form.text

        refused = await http.post("/signin", data={"token": "guess", "next": "/evaluations"})
        assert refused.status_code == 401
        assert "dlscope_session" not in refused.headers.get("set-cookie", "")

        # A sign-in link cannot send the browser to another site.
        away = await http.post("/signin", data={"token": TOKEN, "next": "//evil.example/x"})
        assert (away.status_code, away.headers["location"]) == (303, "/")
        signed = await http.post("/signin", data={"token": TOKEN, "next": "/evaluations"})
        assert (signed.status_code, signed.headers["location"]) == (303, "/evaluations")
        cookie = signed.headers["set-cookie"]
        assert re.search(r"dlscope_session=[0-9a-f]{64}", cookie)
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie  # the cookie is derived from the token, not the token

        assert (await http.get("/evaluations", headers=page)).status_code == 200
        assert (await http.get("/v1/models")).status_code == 200  # the page's own reads
        # The cookie reads; it never writes: a write takes the token itself.
        write = await http.post("/v1/evaluations", json={"model": "squeezenet"})
        assert write.status_code == 401


@pytest.mark.parametrize("any_stack", ["embedded"], indirect=True)
async def test_another_site_is_granted_no_cross_origin_access(any_stack: Stack) -> None:
    """No CORS headers: a page on another origin cannot read the API through its user's
    browser, preflighted or not."""
    other = {"origin": "https://evil.example"}
    async with anonymous(any_stack) as http:
        preflight = await http.options(
            "/v1/evaluations",
            headers={**other, "access-control-request-method": "POST"},
        )
        read = await http.get("/v1/models", headers=other)
    assert read.status_code == 200
    for answer in (preflight, read):
        granted = [h for h in answer.headers if h.lower().startswith("access-control-")]
        assert granted == [], granted
    assert preflight.status_code in (405, 400, 403)


@pytest.mark.parametrize("any_stack", ["embedded"], indirect=True)
async def test_without_a_token_nothing_asks_for_one(any_stack: Stack) -> None:
    async with anonymous(any_stack) as http:
        assert (await http.get("/v1/models")).status_code == 200
        assert (await http.get("/", headers={"accept": "text/html"})).status_code == 200


async def test_the_operator_may_open_reads_and_keep_writes_guarded(
    tmp_path: Path, namespace: str
) -> None:
    settings = Settings(home=tmp_path, namespace=namespace, api_token=TOKEN, public_reads=True)
    async with started_stack(settings, embedded=True) as stack, anonymous(stack) as http:
        assert (await http.get("/v1/models")).status_code == 200
        assert (await http.get("/", headers={"accept": "text/html"})).status_code == 200
        assert (await http.post("/v1/evaluations", json={"model": "x"})).status_code == 401
