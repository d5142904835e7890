"""A throwaway PostgreSQL cluster of our own, to stop and start as an outage would (outage
tests and benchmarks), never the shared server that other tests on the machine are using."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.relay import free_port

__all__ = ["PrivatePostgres", "private_postgres", "private_postgres_missing"]

# Debian's layout: /usr/lib/postgresql/<major>/bin; the newest installed.
POSTGRES_BIN = max(
    Path("/usr/lib/postgresql").glob("*/bin"),
    key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    default=Path("/usr/lib/postgresql/15/bin"),
)


def private_postgres_missing() -> str | None:
    """Why ``private_postgres`` cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root, to run a throwaway PostgreSQL cluster as the postgres user"
    if not (POSTGRES_BIN / "initdb").exists():
        return f"no PostgreSQL binaries under {POSTGRES_BIN}"
    return None


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL cluster of our own, to stop and start (outage tests and
    benchmarks), never the shared one."""

    directory: Path
    port: int

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *arguments: str) -> None:
        # Not captured: the server would inherit the pipes and keep them open.
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(POSTGRES_BIN / "pg_ctl"), *arguments],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        log = str(self.directory / "server.log")
        self._ctl("-D", str(self.directory / "data"), "-l", log, "-o", options, "-w", "start")

    def stop(self) -> None:
        """Fast shutdown: sessions are cut, as in a crash or failover, but the data stays."""
        self._ctl("-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started ``PrivatePostgres`` (trust authentication), removed afterwards. Blocking:
    from async code, enter it and call ``start``/``stop`` through ``asyncio.to_thread``."""
    with tempfile.TemporaryDirectory(prefix="dlscope-pg-") as directory:
        shutil.chown(directory, "postgres")
        cluster = PrivatePostgres(Path(directory), free_port())
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(POSTGRES_BIN / "initdb"),
                "-D",
                str(cluster.directory / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
            check=True,
            capture_output=True,
        )
        cluster.start()
        try:
            yield cluster
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                cluster.stop()
