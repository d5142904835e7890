"""``dlscope agents``: the fleet of a running deployment, as its gateway shows it
(``GET /v1/agents``): who runs what where, whether it is up, and what it is doing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from dlscope.cli.gateway_options import gateway_option, token_option
from dlscope.cli.http import HttpClient
from dlscope.cli.terminal import console

__all__ = ["agents_command", "agents_table"]

# Busy first, then idle, then gone: what a user looks for first.
_ORDER = {"busy": 0, "online": 1, "offline": 2}
_STYLE = {"busy": "yellow", "online": "green", "offline": "red"}


def agents_command(
    gateway: Annotated[str, gateway_option("the deployment's gateway")] = "http://127.0.0.1:8080",
    online: Annotated[
        bool, typer.Option("--online", help="only the agents online (busy or idle)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the gateway's JSON")] = False,
    token: Annotated[str | None, token_option("when reads need it")] = None,
) -> None:
    """The fleet: host, framework and version, hardware, device, state, current job, last
    heartbeat and jobs done of every worker (agent)."""
    client = HttpClient(gateway, token)
    try:
        agents: list[dict[str, Any]] = client.call("GET", "/v1/agents").json()
    finally:
        client.close()
    if online:
        agents = [a for a in agents if a["state"] != "offline"]
    if as_json:
        print(json.dumps(agents, indent=2))
        return
    if not agents:
        console.print(f"no agents have announced themselves to {gateway} yet")
        return
    console.print(agents_table(agents, now=datetime.now(UTC)))


def agents_table(agents: list[dict[str, Any]], *, now: datetime) -> Table:
    table = Table(title="agents", title_justify="left")
    for column in ("agent", "host", "framework", "hardware", "device", "state"):
        table.add_column(column)
    table.add_column("current job")
    table.add_column("last heartbeat", justify="right")
    table.add_column("jobs done", justify="right")
    for agent in sorted(agents, key=lambda a: (_ORDER.get(a["state"], 3), a["host"] or "")):
        state = agent["state"]
        done = str(agent["jobs_done"])
        if agent["jobs_failed"]:
            done += f" ({agent['jobs_failed']} failed)"
        table.add_row(
            escape(agent["agent_id"]),
            escape(agent["host"] or "?"),
            escape(f"{agent['framework'] or '?'} {agent['framework_version'] or ''}".strip()),
            escape(agent["hardware"] or "?"),
            escape(agent["device"] or "-"),
            f"[{_STYLE.get(state, 'white')}]{state}[/]",
            escape(agent["current_job"] or "-"),
            _ago(agent["last_heartbeat"], now),
            done,
        )
    return table


def _ago(moment: str | None, now: datetime) -> str:
    if moment is None:
        return "never"
    seconds = (now - datetime.fromisoformat(moment)).total_seconds()
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"
