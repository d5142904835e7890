"""Fixtures shared by every test layer.

Real services: RabbitMQ and PostgreSQL on 127.0.0.1 (``make test`` starts them). Each test
gets its own broker namespace (exchange and queue prefix) and each session its own Postgres
database, so tests never see each other's messages or rows.

What takes seconds to build or start is built or started once per session and only read by
the tests that share it: the zoo's digits CNN (``digits_zoo``), MiniLM (``minilm_zoo``),
SmolLM2 (``smollm2_home``), llama.cpp's server (``llama_url``) and vLLM (``vllm_served``). A
test that builds or writes such files does so in a folder of its own; one that stops a server
starts its own. The tiers, and the skips CI refuses: tests/tiers.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import orjson
import pytest

from dlscope.cli.http import registration
from harness.opencl import opencl_problem
from shared.config import REPOSITORY_ROOT
from shared.manifests import Manifest, ModelManifest, load_manifest, parse_manifest
from tests.tiers import FIXTURE_MARKS, STRICT, built_here

if TYPE_CHECKING:
    from dlscope.zoo import BuiltModel
    from harness.otlp import OtlpReceiver

RABBITMQ_URL = os.environ.get("DLSCOPE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
# The events of one evaluation that completes, in the order they are stored.
LIFECYCLE = [
    "evaluation.requested",
    "evaluation.scheduled",
    "evaluation.started",
    "evaluation.measured",
    "evaluation.completed",
]
POSTGRES_ADMIN_DSN = os.environ.get(
    "DLSCOPE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)


async def register_model(
    http: httpx.AsyncClient, manifest: Manifest | dict[str, Any]
) -> httpx.Response:
    """Register ``manifest`` (naming files of this host) through a gateway as a user does
    with ``dlscope models register --gateway``: the files it names uploaded with it."""
    if isinstance(manifest, dict):
        manifest = parse_manifest(manifest, origin="manifest")
    body, files = registration(manifest)
    if not files:
        return await http.post("/v1/models", json=body)
    parts = [
        ("file", (name, path.read_bytes(), "application/octet-stream"))
        for name, path in files.items()
    ]
    return await http.post(
        "/v1/models",
        files=[("manifest", ("manifest.json", orjson.dumps(body), "application/json")), *parts],
    )


def runnable(frameworks: tuple[str, ...], hardware: str = "cpu") -> tuple[str, ...]:
    """``frameworks`` less OpenCL where its device compiles nothing here (``opencl_problem``):
    a test that runs every framework runs those this machine can."""
    return tuple(f for f in frameworks if f != "opencl" or opencl_problem(hardware) is None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test by the fixtures it uses (tests/tiers.py), so ``-m`` selects it."""
    for item in items:
        used = getattr(item, "fixturenames", ())
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in used:
                item.add_marker(mark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under ``DLSCOPE_TEST_STRICT=1`` (``make test``), a skip because something the test
    command builds is missing here fails the test instead (tests/tiers.py)."""
    report: pytest.TestReport = yield
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if built_here(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"{reason.removeprefix('Skipped: ')}\n"
                "`make test` builds or installs this, so in its run (DLSCOPE_TEST_STRICT=1) "
                "a test that cannot find it fails rather than skipping."
            )
    return report


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    return RABBITMQ_URL


def _execute(dsn: str, sql: str) -> None:
    """Run ``sql`` on its own thread and loop, so sync and async fixtures alike can call it."""

    async def execute() -> None:
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, execute()).result()


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A database of its own, dropped after; its SQLAlchemy URL."""
    name = f"dlscope_test_{uuid.uuid4().hex[:10]}"
    _execute(POSTGRES_ADMIN_DSN, f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        _execute(POSTGRES_ADMIN_DSN, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh database for this test session; its SQLAlchemy URL."""
    with fresh_database() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The session's database, emptied of dlscope's tables before each test."""
    dsn = postgres_database.replace("postgresql+asyncpg://", "postgresql://")
    _execute(dsn, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
    return postgres_database


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """The folder ``build`` filled, built once for the whole run. Under pytest-xdist each
    worker has session fixtures of its own, so each would build again (SmolLM2 takes over a
    minute on two cores): the first worker to ask builds into a folder beside the workers'
    own, under a lock, and the others wait for it and read what it built. Read only."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    root = tmp_path_factory.getbasetemp().parent
    out, done = root / name, root / f"{name}.built"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            # What a worker that failed left half-built is built again, as a fresh run would.
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            done.touch()
    return out


def load_model(path: Path) -> ModelManifest:
    manifest = load_manifest(path)
    assert isinstance(manifest, ModelManifest), path
    return manifest


@pytest.fixture(scope="session")
def digits_zoo(tmp_path_factory: pytest.TempPathFactory) -> list[BuiltModel]:
    """The zoo's digits CNN, trained and exported once for the session (ten seconds on two
    cores; a dozen tests read it): ONNX, TorchScript and a SavedModel, with their manifests.
    Read only: a test that builds or writes files builds into a folder of its own."""
    from dlscope.zoo import BuiltModel, build_digits

    out = built_once(tmp_path_factory, "digits-zoo", build_digits)
    return [BuiltModel(load_model(path), path) for path in sorted(out.glob("*.yaml"))]


@pytest.fixture(scope="session")
def minilm_zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelManifest]:
    """all-MiniLM-L6-v2 exported once for the session (ONNX and TorchScript, ten seconds and
    more), by framework. Read only, as ``digits_zoo``."""
    from dlscope.zoo.minilm import build_minilm

    out = built_once(tmp_path_factory, "minilm-zoo", build_minilm)
    manifests = [load_model(path) for path in sorted(out.glob("*.yaml"))]
    return {manifest.framework.name: manifest for manifest in manifests}


@pytest.fixture(scope="session")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server serving SmolLM2, started once for the session (its API root), for
    the tests that only send it requests; one that stops a server starts its own."""
    from harness.llama_server import NOT_BUILT, SERVER_PYTHON, llama_server

    if not SERVER_PYTHON.exists():
        pytest.skip(NOT_BUILT)
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as (url, _):
        yield url


@pytest.fixture(scope="session")
def vllm_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, OtlpReceiver]]:
    """vLLM serving SmolLM2 (about a minute to start on two cores), once for the session:
    its API root, and the collector it exports its spans to. Tests that read the spans pick
    theirs by trace id."""
    from harness.otlp import OtlpReceiver
    from harness.vllm_server import NOT_INSTALLED, VLLM, vllm_server

    if not VLLM.exists():
        pytest.skip(NOT_INSTALLED)
    with (
        OtlpReceiver() as receiver,
        vllm_server(tmp_path_factory.mktemp("vllm") / "server.log", traces=receiver.url) as url,
    ):
        yield url, receiver


@pytest.fixture(scope="session")
def smollm2_zoo(smollm2_home: Path) -> dict[str, ModelManifest]:
    """SmolLM2 as the zoo builds it, by framework (``smollm2_home``)."""
    out = smollm2_home / "zoo"
    manifests = [load_manifest(out / f"{name}.yaml") for name in ("smollm2", "smollm2-torch")]
    return {m.framework.name: m for m in manifests if isinstance(m, ModelManifest)}


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dlscope home where the zoo has built SmolLM2 (about 95 s), once for every test
    that reads the built files, or runs the CLI on them, rather than building through the
    CLI. Built in a process of its own, as a user's ``dlscope zoo build`` is: the build's
    gigabytes never enter this one."""

    def build(home: Path) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
        environment["DLSCOPE_HOME"] = str(home)
        command = ["zoo", "build", "smollm2", "--out", str(home / "zoo")]
        built = subprocess.run(
            [sys.executable, "-m", "dlscope", *command],
            env=environment,
            cwd=REPOSITORY_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stderr

    # The CLI writes its database and results in its home: each worker has a copy of its
    # own, the zoo's files (a gigabyte, read only) hard links to the one build's.
    shared = built_once(tmp_path_factory, "smollm2-home", build)
    home = tmp_path_factory.mktemp("smollm2-home")
    shutil.copytree(shared, home, dirs_exist_ok=True, copy_function=_linked_in_zoo)
    return home


def _linked_in_zoo(source: str, destination: str) -> None:
    if Path(source).parent.name == "zoo":
        os.link(source, destination)
    else:
        shutil.copy2(source, destination)
