"""The harness's waits: ``eventually`` returns what its probe found, and a wait that runs out
says what it waited for and where it was stuck, so a failed test tells why."""

from __future__ import annotations

import httpx
import pytest

from harness.waiting import evaluation_outcome, eventually


async def test_eventually_returns_what_the_probe_found_once_it_finds_it() -> None:
    answers = iter([None, [], {"status": "completed"}])

    async def probe() -> dict[str, str] | None:
        return next(answers)

    assert await eventually(probe, timeout=5) == {"status": "completed"}


async def test_a_wait_that_runs_out_names_the_probe_and_where_it_is() -> None:
    async def agent_online() -> bool:
        return False

    with pytest.raises(TimeoutError, match=r"^waited 0.3 s for .*agent_online \(test_waiting.py:"):
        await eventually(agent_online, timeout=0.3)


async def test_an_error_of_the_probe_ends_the_wait_as_it_is() -> None:
    async def broken() -> bool:
        raise TimeoutError("the probe's own")

    with pytest.raises(TimeoutError, match=r"^the probe's own$"):
        await eventually(broken, timeout=5)


async def test_an_evaluation_that_never_ends_is_reported_with_its_last_answer() -> None:
    def gateway(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/evaluations/e1":
            return httpx.Response(200, json={"id": "e1", "status": "running"})
        return httpx.Response(404, json={"detail": "not found"})

    transport = httpx.MockTransport(gateway)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        with pytest.raises(TimeoutError) as raised:
            await evaluation_outcome(http, "e1", timeout=0.3)
    message = str(raised.value)
    assert message.startswith("waited 0.3 s for /v1/evaluations/e1 to be completed or failed")
    assert '"status":"running"' in message


async def test_an_evaluation_not_found_yet_is_waited_for_until_it_ends() -> None:
    answers = iter([(404, {"detail": "no evaluation e1"}), (200, {"status": "requested"})])

    def gateway(request: httpx.Request) -> httpx.Response:
        status, body = next(answers, (200, {"id": "e1", "status": "failed"}))
        return httpx.Response(status, json=body)

    transport = httpx.MockTransport(gateway)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        assert await evaluation_outcome(http, "e1", timeout=5) == {"id": "e1", "status": "failed"}
