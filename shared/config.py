"""Typed settings, read once from the environment (prefix ``DLSCOPE_``) and passed down.

Nothing else in dlscope reads or writes ``os.environ`` (tests/unit/test_environment_reads.py
fails when a module does): the entry points build one ``Settings`` and hand it to the
services they start; a worker hands its framework process what it needs over their
connection (``services.workers.handover.FrameworkOptions``). What a child process inherits,
and the one variable a framework reads at its import, are made here too
(``child_environment``, ``quiet_framework_logs``).
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.artifacts import ArtifactLimits, check_artifact_url
from shared.errors import ConfigurationError

__all__ = [
    "REPOSITORY_ROOT",
    "Settings",
    "child_environment",
    "default_home",
    "quiet_framework_logs",
]

# The built-in manifests and migrations live beside the packages (editable install).
REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


def default_home() -> Path:
    """Where dlscope keeps its database, artifacts and results unless DLSCOPE_HOME says."""
    return Path.home() / ".dlscope"


def child_environment(*, drop: str | None = None, **changes: str | None) -> dict[str, str]:
    """The environment of a process this one starts: this one's, less the variables whose
    names start with ``drop``, with ``changes`` (None removes a variable)."""
    environment = {k: v for k, v in os.environ.items() if drop is None or not k.startswith(drop)}
    for name, value in changes.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def quiet_framework_logs() -> None:
    """TensorFlow's C++ logging above warnings only, unless the user set it: read once, at
    its import, so set before."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class Settings(BaseSettings):
    """Everything a dlscope process needs to know about its environment."""

    model_config = SettingsConfigDict(env_prefix="DLSCOPE_", frozen=True, extra="ignore")

    home: Path = Field(default_factory=default_home)
    broker_url: str = "memory://"
    # Empty means the embedded SQLite database under ``home``.
    database_url: str = ""
    # Prefix of every exchange and queue, so several deployments (or test runs) can share
    # one broker without seeing each other's messages.
    namespace: str = "dlscope"
    manifests_dir: Path = REPOSITORY_ROOT / "manifests"
    otlp_endpoint: str | None = None
    jaeger_ui_url: str = "http://localhost:16686"
    api_token: str | None = None
    heartbeat_interval_s: float = 5.0
    # An agent that has not been heard from for this many heartbeats is considered offline.
    agent_missed_heartbeats: int = 3
    rpc_timeout_s: float = 10.0
    # The longest an evaluation may take from being scheduled to its outcome; then it is
    # failed ("timeout"), so none waits forever for a worker that died.
    evaluation_timeout_s: float = Field(default=3600.0, gt=0)
    # The longest one job may keep a worker's framework process busy (load, warm-up, timed
    # queries, accuracy); then the process is killed and the job fails naming the hang.
    # Below the evaluation timeout, so a hang is reported as what it is.
    framework_deadline_s: float = Field(default=3000.0, gt=0)
    # Attempts at a message whose handler fails transiently, or whose worker died running it,
    # before it is dead-lettered (and, for a job, its evaluation failed with the reason).
    max_delivery_attempts: int = Field(default=3, ge=1)
    prefetch: int = 16
    # Recorder processes, each owning the streams hashed to its queue (``--partition i``).
    # One keeps the single ``<ns>.recorder`` queue; more need RabbitMQ's consistent-hash plugin.
    recorder_partitions: int = Field(default=1, ge=1)
    # What a worker or the registry accepts from a model source (see shared.artifacts).
    artifact_max_download_bytes: int = Field(default=2 * 1024**3, gt=0)
    artifact_download_timeout_s: float = Field(default=30.0, gt=0)
    artifact_max_extracted_bytes: int = Field(default=4 * 1024**3, gt=0)
    artifact_max_archive_members: int = Field(default=10_000, gt=0)
    # The base URL workers on other hosts fetch artifacts from: the registry's artifact server
    # as they reach it (e.g. http://10.0.0.5:8081). Set, the registry serves the files its
    # manifests pin and jobs name every local source by URL under it (shared.artifacts.served).
    artifact_url: str | None = None
    # Where the registry's artifact server listens, "host:port"; by default the port of
    # artifact_url, on every interface when an API token is set and on loopback otherwise.
    artifact_listen: str | None = None
    # Where the registry keeps the files uploaded with registrations, by sha256; by default
    # <home>/uploads. Several registries must share it (a volume) to serve each other's.
    artifact_store: Path | None = None
    # Folders whose files a manifest registered over HTTP or AMQP may name by path (as
    # os.pathsep-separated paths, like PATH). Empty: none; files are uploaded instead.
    registry_source_roots: Annotated[tuple[Path, ...], NoDecode] = ()
    # The hosts (name or name:port, comma-separated) whose http(s):// URLs such a manifest may
    # name. Empty: any host but this network's own (loopback, private and link-local
    # addresses, localhost), which a worker would otherwise be pointed at, its status codes
    # reported back (issue 42).
    registry_source_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    # What the registry's artifact server takes (and workers send) instead of the API token,
    # so that worker hosts, which only fetch files, never hold the token that writes.
    artifact_token: str | None = None
    # An endpoint worker's server (``--framework endpoint``): the OpenAI-compatible API root
    # it measures (e.g. http://127.0.0.1:8000/v1) and the key it sends, from the environment
    # only (never a command line, which other users of the host can read; never an event).
    endpoint_url: str | None = None
    # OpenAI's own variable when dlscope's is not set, as OpenAI's clients read it.
    endpoint_api_key: str | None = Field(
        default=None,
        repr=False,
        validation_alias=AliasChoices("DLSCOPE_ENDPOINT_API_KEY", "OPENAI_API_KEY"),
    )
    # How long one request may wait for its next chunk, and for a connection.
    endpoint_timeout_s: float = Field(default=60.0, gt=0)
    endpoint_connect_timeout_s: float = Field(default=5.0, gt=0)
    # Secure by default: without a token the gateway and the artifact server listen on
    # loopback only; listening elsewhere without one needs this, and is logged at every start.
    allow_unauthenticated: bool = False
    # With a token, reads (results, the registry, pages) need it too, unless this opens them.
    public_reads: bool = False
    # Bytes, the bounds on what comes in (shared.inputs has the field bounds): one HTTP body;
    # the files of one registration (they travel to the registry in one message, base64, so
    # this stays well under RabbitMQ's own 128 MiB limit); one AMQP message, which bounds
    # every stored event too; the nodes of one YAML manifest (aliases are refused outright).
    # Uploads default to the most one message carries: the zoo's sentence encoder and its
    # tokenizer alone are 91 MB.
    max_body_bytes: int = Field(default=1024**2, gt=0)
    max_upload_bytes: int = Field(default=90 * 1024**2, gt=0, le=90 * 1024**2)
    max_message_bytes: int = Field(default=32 * 1024**2, gt=0)
    max_manifest_nodes: int = Field(default=200_000, gt=0)
    # Where workers take their device leases (services.workers.leases): a directory every
    # worker of this host shares. By default <tmp>/dlscope-leases-<host name>: the host name
    # tells apart hosts that share /tmp (containers with a shared volume would set one
    # directory for them all; simulated hosts, harness.hosts, keep theirs apart by name).
    lease_dir: Path | None = None
    # The OpenCL worker: the precompiled program (.aocx, .xclbin, or any OpenCL program
    # binary) to load instead of building the kernels from source, required on a real FPGA
    # board; and a substring of the OpenCL platform to use, when several are installed.
    opencl_binary: Path | None = None
    opencl_platform: str | None = None
    # "lines": a ``dlscope`` run writes its progress as lines for the ``dlscope`` that started
    # it (``--repeat``), rather than drawing it.
    progress: Literal["lines"] | None = None
    # Which GPUs this process may use, as CUDA reads it: a GPU worker leases the first.
    cuda_visible_devices: str | None = Field(default=None, validation_alias="CUDA_VISIBLE_DEVICES")

    @field_validator("namespace")
    @classmethod
    def _namespace_is_one_word(cls, value: str) -> str:
        if not value or "." in value or "#" in value or "*" in value:
            raise ValueError("namespace must be a non-empty word without '.', '*' or '#'")
        return value

    @field_validator("artifact_url")
    @classmethod
    def _artifact_url_is_http(cls, value: str | None) -> str | None:
        if not value:
            return None
        try:
            return check_artifact_url(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("artifact_listen")
    @classmethod
    def _listen_is_host_port(cls, value: str | None) -> str | None:
        if not value:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"DLSCOPE_ARTIFACT_LISTEN must be host:port (e.g. 0.0.0.0:8081), not {value!r}"
            )
        return value

    @field_validator("registry_source_roots", mode="before")
    @classmethod
    def _roots_are_paths(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(Path(p) for p in value.split(os.pathsep) if p.strip())
        return value

    @field_validator("registry_source_hosts", mode="before")
    @classmethod
    def _hosts_are_listed(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(h.strip().lower() for h in value.split(",") if h.strip())
        return value

    @field_validator("registry_source_roots")
    @classmethod
    def _roots_are_absolute(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        relative = [str(p) for p in value if not p.is_absolute()]
        if relative:
            raise ValueError(
                f"DLSCOPE_REGISTRY_SOURCE_ROOTS takes absolute folders, not {', '.join(relative)}"
            )
        return value

    @property
    def resolved_artifact_token(self) -> str | None:
        """The token of the artifact server: its own, else the API token."""
        return self.artifact_token or self.api_token

    @property
    def resolved_lease_dir(self) -> Path:
        """Where this host's device leases are: ``lease_dir``, else one per host name."""
        if self.lease_dir is not None:
            return self.lease_dir
        return Path(tempfile.gettempdir()) / f"dlscope-leases-{socket.gethostname()}"

    @property
    def resolved_artifact_store(self) -> Path:
        return self.artifact_store or self.home / "uploads"

    @property
    def upload_message_bytes(self) -> int:
        """The largest registration message: its files in base64 (4 bytes per 3), the
        manifest and the envelope around them."""
        return self.max_upload_bytes * 4 // 3 + self.max_body_bytes + 64 * 1024

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.home / 'dlscope.db'}"

    @property
    def artifact_limits(self) -> ArtifactLimits:
        return ArtifactLimits(
            max_download_bytes=self.artifact_max_download_bytes,
            download_timeout_s=self.artifact_download_timeout_s,
            max_extracted_bytes=self.artifact_max_extracted_bytes,
            max_archive_members=self.artifact_max_archive_members,
        )

    @property
    def trace_file(self) -> Path | None:
        """The file spans are appended to (``DLSCOPE_OTLP_ENDPOINT=file://<path>``), if any."""
        endpoint = self.otlp_endpoint or ""
        return Path(endpoint.removeprefix("file://")) if endpoint.startswith("file://") else None

    def trace_url(self, trace_id: str) -> str | None:
        """The trace in Jaeger's UI: only where spans go to a collector, never to a Jaeger
        nobody started (no exporter, or spans written to a file)."""
        if not self.otlp_endpoint or self.trace_file is not None:
            return None
        return f"{self.jaeger_ui_url.rstrip('/')}/trace/{trace_id}"

    def trace_where(self, trace_id: str) -> str:
        """Where to see the trace, in words: its link, the command that reads its file, or
        that nothing kept it."""
        url = self.trace_url(trace_id)
        if url is not None:
            return url
        if self.trace_file is not None:
            return f"dlscope trace {trace_id} (spans in {self.trace_file})"
        return (
            "not exported: set DLSCOPE_OTLP_ENDPOINT (file://<path>, read by `dlscope trace`, "
            "or a collector such as Jaeger) to keep traces"
        )
