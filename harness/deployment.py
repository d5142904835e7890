"""dlscope deployed on this machine as separate OS processes, the way an operator runs it on
many: used by the end-to-end tests and the benchmarks."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

from dlscope import catalogue
from dlscope.catalogue import package
from harness.relay import free_port
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT, child_environment
from shared.messages import FRAMEWORKS, HARDWARE, Topology
from shared.messaging.amqp import AmqpBroker

__all__ = [
    "SERVICES",
    "Deployment",
    "copy_package_sources",
    "fresh_database",
    "purge_namespace",
    "throwaway_deployment",
]

# Each service by the package its process runs (``python -m services.<name>``), in the
# catalogue's start order.
SERVICES = [package(name).removeprefix("services.") for name in catalogue.SERVICES]


async def fresh_database(admin_dsn: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A new Postgres database: its SQLAlchemy URL, and a function that drops it."""
    name = f"dlscope_e2e_{uuid.uuid4().hex[:10]}"
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()

    async def drop() -> None:
        connection = await asyncpg.connect(admin_dsn)
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()

    base = admin_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return f"{base}/{name}", drop


@dataclass
class Deployment:
    broker_url: str
    database_url: str
    namespace: str
    workdir: Path
    port: int = field(default_factory=free_port)
    # Recorder processes, one per partition (DLSCOPE_RECORDER_PARTITIONS); one is the default.
    recorders: int = 1
    # One worker process per framework, on the CPU.
    frameworks: tuple[str, ...] = ("onnxruntime",)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def environment(self) -> dict[str, str]:
        return child_environment(
            DLSCOPE_BROKER_URL=self.broker_url,
            DLSCOPE_DATABASE_URL=self.database_url,
            DLSCOPE_NAMESPACE=self.namespace,
            DLSCOPE_HOME=str(self.workdir / "home"),
            DLSCOPE_HEARTBEAT_INTERVAL_S="1",
            DLSCOPE_RECORDER_PARTITIONS=str(self.recorders),
        )

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def migrate(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "dlscope", "db", "upgrade"],
            env=self.environment,
            check=True,
            cwd=REPOSITORY_ROOT,
            capture_output=True,
        )

    def start_all(self) -> None:
        for service in SERVICES:
            self.start(service)

    def start(self, service: str) -> None:
        """Start ``service``; ``recorder`` starts every recorder, named ``recorder`` when there
        is one and ``recorder-<i>`` for partition i when there are more; ``workers`` starts a
        worker per framework, named ``workers`` when there is one, ``workers-<framework>``
        when there are more."""
        if service == "recorder" and self.recorders > 1:
            for partition in range(self.recorders):
                self._spawn(f"recorder-{partition}", "recorder", ["--partition", str(partition)])
            return
        if service == "workers":
            for framework in self.frameworks:
                name = "workers" if len(self.frameworks) == 1 else f"workers-{framework}"
                self._spawn(name, "workers", ["--framework", framework])
            return
        arguments = {"gateway": ["--port", str(self.port)]}
        self._spawn(service, service, arguments.get(service, []))

    def start_worker(self, name: str, framework: str, agent_id: str, *arguments: str) -> None:
        """One more worker process, ``name``, with a known agent id (to find it again) and
        any further ``arguments`` (an endpoint worker's ``--endpoint URL``)."""
        self._spawn(name, "workers", ["--framework", framework, "--agent-id", agent_id, *arguments])

    def _spawn(self, name: str, service: str, arguments: list[str]) -> None:
        # The child keeps its own descriptor of the log; ours is closed at once.
        with (self.workdir / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", f"services.{service}", *arguments],
                env=self.environment,
                cwd=REPOSITORY_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self, service: str) -> None:
        """SIGKILL: no clean shutdown, as when a host dies."""
        process = self.processes.pop(service)
        process.kill()
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise AssertionError(f"{name} did not stop on SIGTERM") from None
        self.processes.clear()

    def log(self, service: str) -> str:
        return (self.workdir / f"{service}.log").read_text(errors="replace")

    async def ready(self, http: httpx.AsyncClient) -> None:
        """Wait until the gateway answers and a worker of every framework is online."""

        async def up() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited early:\n{self.log(name)}")
            try:
                ready = (await http.get("/readyz")).status_code == 200
                agents = (await http.get("/v1/agents")).json() if ready else []
            except httpx.TransportError:
                return False
            online = {a["framework"] for a in agents if a["status"] == "online"}
            return online >= set(self.frameworks)

        await eventually(up, timeout=60)


@contextlib.asynccontextmanager
async def throwaway_deployment(
    broker_url: str,
    admin_dsn: str,
    *,
    prefix: str = "local",
    recorders: int = 1,
    frameworks: tuple[str, ...] = ("onnxruntime",),
) -> AsyncIterator[Deployment]:
    """A migrated deployment with its own database and namespace, removed afterwards; no
    service is started yet."""
    database_url, drop_database = await fresh_database(admin_dsn)
    with tempfile.TemporaryDirectory() as workdir:
        deployment = Deployment(
            broker_url=broker_url,
            database_url=database_url,
            namespace=f"{prefix}{uuid.uuid4().hex[:8]}",
            workdir=Path(workdir),
            recorders=recorders,
            frameworks=frameworks,
        )
        try:
            deployment.migrate()
            yield deployment
        finally:
            deployment.stop_all()
            await drop_database()
            await purge_namespace(broker_url, deployment.namespace, recorder_partitions=recorders)


# The durable queues dlscope's services declare (the others delete themselves).
_DURABLE_QUEUES = (
    "registry",
    "analyzer",
    "analyzer.experiments",
    "scheduler.requests",
    "scheduler.experiments",
    # The shared job queue of every framework on every kind of hardware a worker may serve.
    *(f"worker.{framework}.{hardware}" for framework in FRAMEWORKS for hardware in HARDWARE),
)


async def purge_namespace(url: str, namespace: str, *, recorder_partitions: int = 1) -> None:
    """Remove a deployment's queues and exchanges from the broker, leaving it as it was."""
    topology = Topology(namespace)
    queues = [f"{namespace}.{queue}" for queue in _DURABLE_QUEUES]
    queues += [topology.recorder_queue(i, recorder_partitions) for i in range(recorder_partitions)]
    queues.append(topology.dead_letters)
    broker = AmqpBroker(url, connection_name=f"dlscope-harness-purge-{namespace}")
    await broker.connect()
    try:
        for queue in queues:
            await broker.delete_queue(queue)
        for exchange in (
            topology.recorder_partitions,
            topology.events,
            topology.jobs,
            topology.dlx,
        ):
            await broker.delete_exchange(exchange)
    finally:
        await broker.close()


# What a source checkout holds that a wheel is built from (not .venv, tests or caches).
PACKAGE_SOURCES = (
    "pyproject.toml",
    "README.md",
    "dlscope",
    "services",
    "shared",
    "manifests",
    "migrations",
)


def copy_package_sources(target: Path) -> None:
    """Copy what ``pip install <target>`` builds dlscope from into ``target``, so that an
    install from it sees none of this checkout's venv, tests or caches."""
    target.mkdir(parents=True, exist_ok=True)
    for name in PACKAGE_SOURCES:
        path = REPOSITORY_ROOT / name
        if path.is_dir():
            shutil.copytree(path, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, target / name)
