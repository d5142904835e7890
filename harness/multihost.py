"""dlscope across simulated hosts: the control plane on this machine, workers on hosts that
reach it only over their links (``harness.hosts``). Used by the multi-host e2e test and the
fan-out benchmark; ``python -m harness.multihost`` starts one to try by hand (as root).

    control plane (root namespace)        simulated host i (network namespace)
      recorder registry analyzer            worker(s): `python -m services.workers`
      scheduler gateway (127.0.0.1)           broker:    amqp://<bridge address>:<relay>
      registry's artifact server  <------     artifacts: http://<bridge address>:<port>
      relay <bridge>:<port> -> RabbitMQ       no database, and the control plane's
                                              files and home hidden under an empty tmpfs

The shared RabbitMQ listens on loopback only: a relay on the bridge address carries the
hosts' connections to it, so the broker others use is never reconfigured. Workers get
nothing but the broker and artifact URLs, as on real remote hardware. The hosts share this
machine's /tmp, where device leases are kept per host name (``services.workers.leases``): each
host's workers take turns at its CPU, and the hosts measure in parallel, as real ones would.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from dlscope import catalogue
from harness.deployment import Deployment, fresh_database, purge_namespace
from harness.hosts import Host, Hosts, hosts_missing, simulated_hosts
from harness.relay import Relay
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT, child_environment
from shared.messages import Topology
from shared.messaging.amqp import AmqpBroker

__all__ = ["ControlPlane", "Fleet", "fleet", "hosts_missing"]

T = TypeVar("T")
CONTROL_PLANE = (*catalogue.CONTROL_PLANE, "gateway")


@dataclass
class ControlPlane(Deployment):
    """The services but the workers, with the registry's artifact server on the bridge."""

    artifact_url: str = ""
    artifact_listen: str = ""
    # The artifact server listens on the bridge, which the hosts reach: it takes a token, the
    # one the workers are given (never the API token, which they have no use for).
    artifact_token: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def environment(self) -> dict[str, str]:
        return {
            **super().environment,
            "DLSCOPE_ARTIFACT_URL": self.artifact_url,
            "DLSCOPE_ARTIFACT_LISTEN": self.artifact_listen,
            "DLSCOPE_ARTIFACT_TOKEN": self.artifact_token,
        }


@dataclass
class Fleet:
    """A running control plane and the hosts its workers run on."""

    control_plane: ControlPlane
    hosts: Hosts
    # Where a host reaches the broker: the relay on the bridge.
    broker_url: str
    workdir: Path
    # The agents started on each host, by host name.
    agents: dict[str, list[str]] = field(default_factory=dict)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def gateway_url(self) -> str:
        return self.control_plane.gateway_url

    @property
    def private(self) -> Path:
        """The control plane's own directory (its files, home and logs), hidden from hosts."""
        return self.control_plane.workdir

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts.hosts if h.name == name)

    def start_worker(self, host: Host, framework: str = "onnxruntime", *, agent_id: str) -> None:
        home = self.workdir / "hosts" / host.name
        home.mkdir(parents=True, exist_ok=True)
        # Nothing of the control plane's configuration: only what a remote worker is given.
        environment = {
            **child_environment(drop="DLSCOPE_"),
            "DLSCOPE_BROKER_URL": self.broker_url,
            "DLSCOPE_NAMESPACE": self.control_plane.namespace,
            "DLSCOPE_HOME": str(home / "home"),
            "DLSCOPE_HEARTBEAT_INTERVAL_S": self.control_plane.environment[
                "DLSCOPE_HEARTBEAT_INTERVAL_S"
            ],
            # What fetching from the deployment's artifact server takes: where it is, and
            # the token that guards it (it listens on the bridge, beyond loopback).
            "DLSCOPE_ARTIFACT_URL": self.control_plane.artifact_url,
            "DLSCOPE_ARTIFACT_TOKEN": self.control_plane.artifact_token,
        }
        command = ["-m", "services.workers", "--framework", framework, "--agent-id", agent_id]
        self.workers[agent_id] = self.hosts.run(
            host,
            [sys.executable, *command],
            env=environment,
            log=home / f"{agent_id}.log",
            hide=[self.private],
            cwd=REPOSITORY_ROOT,
        )
        self.agents.setdefault(host.name, []).append(agent_id)

    def worker_log(self, agent_id: str) -> str:
        for host, agents in self.agents.items():
            if agent_id in agents:
                path = self.workdir / "hosts" / host / f"{agent_id}.log"
                return path.read_text(errors="replace")
        raise KeyError(agent_id)

    async def ready(self, http: httpx.AsyncClient, *, timeout: float = 90.0) -> None:
        """Wait until the gateway answers and every worker started is online."""
        wanted = {agent for agents in self.agents.values() for agent in agents}

        async def up() -> bool:
            for name, process in {**self.control_plane.processes, **self.workers}.items():
                if process.poll() is not None:
                    log = (
                        self.worker_log(name)
                        if name in self.workers
                        else self.control_plane.log(name)
                    )
                    raise AssertionError(f"{name} exited early:\n{log}")
            try:
                if (await http.get("/readyz")).status_code != 200:
                    return False
                agents = (await http.get("/v1/agents")).json()
            except httpx.TransportError:
                return False
            return {a["agent_id"] for a in agents if a["status"] == "online"} >= wanted

        await eventually(up, timeout=timeout)


@contextlib.contextmanager
def fleet(
    broker_url: str,
    admin_dsn: str,
    workdir: Path,
    *,
    hosts: int = 3,
    workers_per_host: int = 1,
    framework: str = "onnxruntime",
) -> Iterator[Fleet]:
    """A migrated control plane, ``hosts`` simulated hosts with their workers started (not
    yet online: ``await fleet.ready(http)``); all removed however the block ends."""
    broker = urlsplit(broker_url)
    with contextlib.ExitStack() as stack:
        simulated = stack.enter_context(simulated_hosts(hosts))
        relay = stack.enter_context(Relay())
        relay_port = relay.forward(
            simulated.address, broker.hostname or "127.0.0.1", broker.port or 5672
        )
        database_url, drop_database = _blocking(lambda: fresh_database(admin_dsn))
        stack.callback(_blocking, drop_database)
        artifact_port = _free_port(simulated.address)
        control_plane = ControlPlane(
            broker_url=broker_url,
            database_url=database_url,
            namespace=f"mh{uuid.uuid4().hex[:10]}",
            workdir=workdir / "control-plane",
            frameworks=(),
            artifact_url=f"http://{simulated.address}:{artifact_port}",
            artifact_listen=f"{simulated.address}:{artifact_port}",
        )
        control_plane.workdir.mkdir(parents=True)
        stack.callback(_blocking, lambda: purge_namespace(broker_url, control_plane.namespace))
        stack.callback(_stop_quietly, control_plane)
        control_plane.migrate()
        for service in CONTROL_PLANE:
            control_plane.start(service)
        # The hosts' first announcements must find the recorder's queue, or the read model
        # learns their capabilities only at their next announcement.
        _blocking(
            lambda: _declared(broker_url, Topology(control_plane.namespace).recorder_queue(0, 1))
        )
        running = Fleet(
            control_plane=control_plane,
            hosts=simulated,
            broker_url=_with_address(broker_url, simulated.address, relay_port),
            workdir=workdir,
        )
        # Workers stop first, while the broker they say goodbye on is still theirs.
        stack.callback(simulated.close)
        for host in simulated.hosts:
            for k in range(1, workers_per_host + 1):
                running.start_worker(host, framework, agent_id=f"{host.name}-{framework}-{k}")
        yield running


async def _declared(broker_url: str, queue: str, *, timeout: float = 60.0) -> None:
    """Wait until ``queue`` exists on the broker."""
    broker = AmqpBroker(broker_url, connection_name="dlscope-harness-multihost")
    await broker.connect()
    try:
        await eventually(
            lambda: broker.queue_exists(queue),
            timeout=timeout,
            what=f"queue {queue} to be declared",
        )
    finally:
        await broker.close()


def _with_address(url: str, host: str, port: int) -> str:
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{host}:{port}" if credentials else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _stop_quietly(control_plane: ControlPlane) -> None:
    for process in control_plane.processes.values():
        process.send_signal(signal.SIGTERM)
    for process in control_plane.processes.values():
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    control_plane.processes.clear()


def _blocking(coroutine: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from blocking code, whether or not a loop is running here
    (the benchmark's is): on a thread with a loop of its own."""

    async def run() -> T:
        return await coroutine()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, run()).result()


def main(argv: Sequence[str] | None = None) -> None:
    """Start the control plane and the hosts, print how to reach them, wait for Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m harness.multihost", description=__doc__)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--workers-per-host", type=int, default=1)
    parser.add_argument("--broker-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    missing = hosts_missing()
    if missing is not None:
        raise SystemExit(f"cannot simulate hosts here: {missing}")
    with (
        tempfile.TemporaryDirectory(prefix="dlscope-multihost-") as workdir,
        fleet(
            args.broker_url,
            args.postgres_dsn,
            Path(workdir),
            hosts=args.hosts,
            workers_per_host=args.workers_per_host,
        ) as running,
    ):

        async def wait() -> None:
            async with httpx.AsyncClient(base_url=running.gateway_url, timeout=30) as http:
                await running.ready(http)

        asyncio.run(wait())
        print(f"gateway: {running.gateway_url}  (DLSCOPE_GATEWAY_URL={running.gateway_url})")
        for host in running.hosts.hosts:
            agents = ", ".join(running.agents[host.name])
            print(f"{host.name}: {host.address} in netns {host.netns}, link {host.link}: {agents}")
        print("try: dlscope agents; cut a host off with: ip link set <link> down. Ctrl-C ends.")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
