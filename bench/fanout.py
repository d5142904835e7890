"""Fan-out: one experiment over N hosts, N = 1, 2, 3 (network namespaces, as root).

The control plane runs here; each simulated host runs one onnxruntime worker that reaches it
only over its own link (``harness.multihost``) and fetches the model from the registry's
artifact server. An experiment evaluates one model on every host at once. The figure is

    experiment wall time / slowest member

where the wall time runs from ``experiment.requested`` to ``experiment.compared`` and a
member's time from its ``evaluation.requested`` to its ``evaluation.completed`` (the
``occurred_at`` of the events: one machine, one clock). Members run one after another would
give about N; run in parallel, 1 plus what planning, dispatch and comparison add (target
<= 1.1). Each member's own time is also reported: on a machine with fewer cores than hosts,
the hosts share the CPU and every member is slower than one alone, which the ratio (by
design) does not hide or count.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import orjson

from bench.common import POSTGRES_ADMIN_DSN, RABBITMQ_URL
from harness.multihost import Fleet, fleet, hosts_missing

__all__ = ["run", "suite"]

SCENARIO = {"iterations": 600, "min_duration_s": 0, "warmup": 20}
REPEATS = 3
WATCHED = (
    "experiment.requested",
    "experiment.scheduled",
    "experiment.compared",
    "experiment.failed",
    "evaluation.requested",
    "evaluation.completed",
    "evaluation.failed",
)


async def suite() -> dict[str, Any]:
    missing = hosts_missing()
    if missing is not None:
        return {"skipped": missing}
    runs = [await run(hosts) for hosts in (1, 2, 3)]
    return {"scenario": SCENARIO, "repeats": REPEATS, "runs": runs}


async def run(
    hosts: int = 3, *, repeats: int = REPEATS, scenario: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One experiment over ``hosts`` simulated hosts, ``repeats`` times after one to fill
    the caches, each member running ``scenario`` (``SCENARIO``)."""
    missing = hosts_missing()
    if missing is not None:
        return {"skipped": missing}
    with tempfile.TemporaryDirectory(prefix="dlscope-fanout-") as workdir:
        # Blocking set-up and tear-down (namespaces, processes) off the loop.
        context = fleet(RABBITMQ_URL, POSTGRES_ADMIN_DSN, Path(workdir), hosts=hosts)
        running = await asyncio.to_thread(context.__enter__)
        try:
            return await _measure(running, hosts, repeats, scenario or SCENARIO)
        finally:
            await asyncio.to_thread(context.__exit__, None, None, None)


async def _measure(
    running: Fleet, hosts: int, repeats: int, scenario: dict[str, Any]
) -> dict[str, Any]:
    async with (
        httpx.AsyncClient(base_url=running.gateway_url, timeout=30) as http,
        await aio_pika.connect(running.control_plane.broker_url) as connection,
    ):
        await running.ready(http)
        channel = await connection.channel()
        events = await channel.get_exchange(f"{running.control_plane.namespace}.events")
        watch = await channel.declare_queue(exclusive=True)
        for key in WATCHED:
            await watch.bind(events, key)
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await inbox.put(orjson.loads(message.body))
            await message.ack()

        await watch.consume(on_message)
        # The first experiment fetches the model into every host's cache: not measured.
        await _experiment(http, inbox, scenario)
        measured = [await _experiment(http, inbox, scenario) for _ in range(repeats)]
    ratios = [m["ratio"] for m in measured]
    return {
        "hosts": hosts,
        "wall_s": [m["wall_s"] for m in measured],
        "slowest_member_s": [m["slowest_member_s"] for m in measured],
        "members_s": [m["members_s"] for m in measured],
        # What the fan-out adds to its slowest member: planning, dispatch, comparison.
        "overhead_ms": [round(1000 * (m["wall_s"] - m["slowest_member_s"]), 1) for m in measured],
        "ratio": ratios,
        "ratio_median": statistics.median(ratios),
    }


async def _experiment(
    http: httpx.AsyncClient, inbox: asyncio.Queue[dict[str, Any]], scenario: dict[str, Any]
) -> dict[str, Any]:
    response = await http.post(
        "/v1/experiments",
        json={"model": "squeezenet", "frameworks": ["onnxruntime"], "scenario": scenario},
    )
    response.raise_for_status()
    experiment_id = response.json()["id"]
    seen: dict[str, datetime] = {}
    requested: dict[str, datetime] = {}
    finished: dict[str, datetime] = {}
    async with asyncio.timeout(300):
        while "experiment.compared" not in seen:
            envelope = await inbox.get()
            payload, kind = envelope["payload"], envelope["type"]
            if payload.get("experiment_id") != experiment_id:
                continue
            at = datetime.fromisoformat(envelope["occurred_at"])
            if kind == "experiment.failed":
                raise RuntimeError(f"experiment failed: {payload['reason']}")
            if kind == "evaluation.failed":
                raise RuntimeError(f"a member failed: {payload['stage']}: {payload['reason']}")
            if kind == "evaluation.requested":
                requested[payload["evaluation_id"]] = at
            elif kind == "evaluation.completed":
                finished[payload["evaluation_id"]] = at
            else:
                seen[kind] = at
    members = sorted(
        (finished[e] - requested[e]).total_seconds() for e in finished if e in requested
    )
    wall = (seen["experiment.compared"] - seen["experiment.requested"]).total_seconds()
    return {
        "wall_s": round(wall, 3),
        "members_s": [round(m, 3) for m in members],
        "slowest_member_s": round(members[-1], 3),
        "ratio": round(wall / members[-1], 4),
    }
