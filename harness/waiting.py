"""Waiting for what another process (or another task) does: ``eventually``, and the waits the
tests share on top of it, through a deployment's HTTP API as a user's script would wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import httpx

__all__ = [
    "EVALUATION_ENDED",
    "EXPERIMENT_ENDED",
    "evaluation_outcome",
    "eventually",
    "experiment_outcome",
    "models_listed",
]

T = TypeVar("T")

# Soon enough after the fact for a test not to wait long, seldom enough for the polls not to
# load the services they watch (the whole deployment shares a two-core machine).
POLL_INTERVAL_S = 0.1
# The statuses an evaluation or an experiment ends in: nothing happens to it afterwards.
EVALUATION_ENDED = ("completed", "failed")
EXPERIMENT_ENDED = ("compared", "failed")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30.0,
    what: str | None = None,
    every_s: float = POLL_INTERVAL_S,
) -> T:
    """Await ``probe`` until it returns something truthy, and return that.

    For state that another process changes (a read model behind the gateway, a queue on the
    broker), or another task, where there is no event to await: poll it. After ``timeout``
    seconds, fail with a ``TimeoutError`` naming what was awaited (``what``, or else the
    probe and where it is defined) and what the probe last returned. An exception the probe
    raises ends the wait at once, as it is. ``every_s``: the pause between probes.
    """
    last: T | None = None
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            while True:
                value = await probe()
                if value:
                    return value
                last = value
                await asyncio.sleep(every_s)
    except TimeoutError:
        if not scope.expired():
            raise  # the probe's own
        awaited = what or _described(probe)
        returned = "" if last is None or last is False else f"; it last returned {_short(last)}"
        raise TimeoutError(f"waited {timeout:g} s for {awaited}{returned}") from None


async def evaluation_outcome(
    http: httpx.AsyncClient,
    evaluation_id: object,
    *,
    timeout: float = 30.0,
    every_s: float = POLL_INTERVAL_S,
) -> dict[str, Any]:
    """The evaluation as ``GET /v1/evaluations/<id>`` shows it once it has completed or
    failed. Not found yet is no outcome: the gateway's read model follows the events."""
    path = f"/v1/evaluations/{evaluation_id}"
    return await _ended(http, path, EVALUATION_ENDED, timeout, every_s)


async def experiment_outcome(
    http: httpx.AsyncClient, experiment_id: object, *, timeout: float = 30.0
) -> dict[str, Any]:
    """The experiment as ``GET /v1/experiments/<id>`` shows it once it has been compared or
    has failed."""
    return await _ended(
        http, f"/v1/experiments/{experiment_id}", EXPERIMENT_ENDED, timeout, POLL_INTERVAL_S
    )


async def models_listed(
    http: httpx.AsyncClient, names: Collection[str], *, timeout: float = 30.0
) -> None:
    """Wait until ``GET /v1/models`` lists every model of ``names``. Registered is not yet
    listed: the read model follows once the recorder has stored the registrations."""
    wanted = set(names)

    async def listed() -> bool:
        return {model["name"] for model in (await http.get("/v1/models")).json()} >= wanted

    await eventually(listed, timeout=timeout, what=f"models {sorted(wanted)} to be listed")


async def _ended(
    http: httpx.AsyncClient, path: str, statuses: tuple[str, ...], timeout: float, every_s: float
) -> dict[str, Any]:
    answer = "none"

    async def ended() -> dict[str, Any] | None:
        nonlocal answer
        response = await http.get(path)
        answer = f"{response.status_code} {_short(response.text)}"
        if response.status_code != 200:
            return None
        body: dict[str, Any] = response.json()
        return body if body.get("status") in statuses else None

    try:
        awaited = f"{path} to be {' or '.join(statuses)}"
        return await eventually(ended, timeout=timeout, what=awaited, every_s=every_s)
    except TimeoutError as exc:
        # Where it was stuck is what tells why.
        raise TimeoutError(f"{exc}; the last answer was {answer}") from None


def _described(probe: Callable[[], object]) -> str:
    name = getattr(probe, "__qualname__", None) or repr(probe)
    code = getattr(probe, "__code__", None)
    return f"{name} ({Path(code.co_filename).name}:{code.co_firstlineno})" if code else name


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"
