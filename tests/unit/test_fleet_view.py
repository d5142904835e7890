"""The fleet as people read it (``GET /v1/agents``, ``dlscope agents``): the device each
agent runs on in a few words, and a table with the busiest first."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from dlscope.cli.agents import agents_table
from services.gateway.agents_api import describe_device


def test_the_device_is_what_the_agent_announced() -> None:
    assert describe_device("cpu", {"cpu_model": "AMD EPYC", "cpu_cores": 2}) == (
        "AMD EPYC (2 cores)"
    )
    gpu = {"cpu_model": "x", "gpus": [{"index": 0, "name": "NVIDIA H100"}]}
    assert describe_device("gpu", gpu) == "GPU 0: NVIDIA H100"
    opencl = {"opencl": {"name": "cpu-znver3", "platform": "Portable Computing Language",
                         "emulated": True}}  # fmt: skip
    assert describe_device("fpga", opencl) == (
        "OpenCL cpu-znver3 on Portable Computing Language (emulating an FPGA board)"
    )
    # A worker whose device is absent says so, and the fleet shows why.
    assert describe_device("gpu", {"device_error": "no CUDA device"}) == (
        "unavailable: no CUDA device"
    )
    assert describe_device(None, None) is None


def agent(agent_id: str, host: str, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "host": host,
        "framework": "onnxruntime",
        "framework_version": "1.31.1",
        "hardware": "cpu",
        "device": "AMD EPYC (2 cores)",
        "state": state,
        "current_job": None,
        "last_heartbeat": "2026-11-25T05:00:00+00:00",
        "jobs_done": 3,
        "jobs_failed": 0,
        **extra,
    }


def test_the_table_lists_busy_agents_first_with_their_job() -> None:
    now = datetime(2026, 11, 25, 5, 0, 12, tzinfo=UTC)
    table = agents_table(
        [
            agent("a-off", "h3", "offline", jobs_failed=1),
            agent("a-idle", "h1", "online"),
            agent("a-busy", "h2", "busy", current_job="0b9f3f5e-6a41-4b7c-8d7e-1c2a3b4c5d6e"),
        ],
        now=now,
    )
    out = io.StringIO()
    Console(file=out, width=250).print(table)
    rows = [line for line in out.getvalue().splitlines() if " h" in line and "a-" in line]
    assert [next(w for w in ("a-busy", "a-idle", "a-off") if w in r) for r in rows] == [
        "a-busy",
        "a-idle",
        "a-off",
    ]
    assert "0b9f3f5e-6a41-4b7c-8d7e-1c2a3b4c5d6e" in rows[0]
    assert "12 s ago" in rows[1]
    assert "3 (1 failed)" in rows[2]
