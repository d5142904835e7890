"""The CLI as a client of a running gateway: submit a request, then wait for its outcome."""

from __future__ import annotations

import time
from typing import Any

import httpx

from dlscope.terminal import fail

__all__ = ["gateway_client", "submitted", "until_settled"]


def gateway_client(gateway: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=gateway, headers=headers, timeout=30)


def submitted(
    client: httpx.Client, gateway: str, path: str, body: dict[str, Any], what: str
) -> dict[str, Any]:
    """POST ``body`` to ``path``; the gateway's acceptance (202), or the CLI fails saying why."""
    try:
        response = client.post(path, json=body)
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the gateway at {gateway}: {exc}", 2) from exc
    if response.status_code != 202:
        raise fail(f"the gateway refused the {what} ({response.status_code}): {response.text}", 2)
    accepted: dict[str, Any] = response.json()
    return accepted


def until_settled(
    client: httpx.Client, path: str, settled: tuple[str, ...], every_s: float
) -> dict[str, Any]:
    """GET ``path`` until its ``status`` is one of ``settled``."""
    while True:
        response = client.get(path)
        if response.status_code == 200 and response.json()["status"] in settled:
            body: dict[str, Any] = response.json()
            return body
        time.sleep(every_s)  # polling a remote HTTP API: nothing to await locally
