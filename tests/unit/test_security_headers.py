"""Every answer of the gateway carries its security headers: the pages' policy unless the
answer chose its own (a report's), streams as they are sent (not held back), and the API's
documentation pages a policy that allows their CDN and their own inline script by hash."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, StreamingResponse

from services.gateway.headers import DOCUMENT_POLICY, PAGE_POLICY, SecurityHeaders


def app() -> FastAPI:
    application = FastAPI()

    @application.get("/page")
    async def page() -> PlainTextResponse:
        return PlainTextResponse("<p>hello</p>", media_type="text/html")

    @application.get("/report")
    async def report() -> PlainTextResponse:
        return PlainTextResponse(
            "<style>p{}</style>",
            media_type="text/html",
            headers={"content-security-policy": DOCUMENT_POLICY},
        )

    @application.get("/stream")
    async def stream() -> StreamingResponse:
        async def frames() -> AsyncIterator[str]:
            for i in range(3):
                yield f"data: {i}\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    application.add_middleware(SecurityHeaders, api_docs=(application.docs_url, None))
    return application


async def get(path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        return await http.get(path)


async def test_a_page_and_any_other_answer_carry_the_pages_policy() -> None:
    for path in ("/page", "/stream", "/nowhere", "/openapi.json"):
        response = await get(path)
        assert response.headers["content-security-policy"] == PAGE_POLICY, path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"
    assert (await get("/stream")).text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    for directive in ("script-src 'self'", "object-src 'none'", "frame-ancestors 'none'"):
        assert directive in PAGE_POLICY.split("; ")
    assert "unsafe" not in PAGE_POLICY


async def test_an_answer_with_a_policy_of_its_own_keeps_it() -> None:
    response = await get("/report")
    assert response.headers["content-security-policy"] == DOCUMENT_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_the_api_documentation_runs_its_own_inline_script_only() -> None:
    response = await get("/docs")
    assert b"SwaggerUIBundle({" in response.content  # the page, whole
    inline = response.content.split(b"<script>")[1].split(b"</script>")[0]
    digest = base64.b64encode(hashlib.sha256(inline).digest()).decode()
    policy = dict(d.split(" ", 1) for d in response.headers["content-security-policy"].split("; "))
    assert policy["script-src"] == f"'self' https://cdn.jsdelivr.net 'sha256-{digest}'"
    assert policy["frame-ancestors"] == "'none'"
    assert response.headers["x-content-type-options"] == "nosniff"
