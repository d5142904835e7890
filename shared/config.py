"""Typed settings, read once from the environment (prefix ``DLSCOPE_``) and passed down.

Nothing else in dlscope reads ``os.environ``: the entry points build one ``Settings`` and
hand it to the services they start.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.artifacts import ArtifactLimits, check_artifact_url
from shared.errors import ConfigurationError

__all__ = ["REPOSITORY_ROOT", "Settings"]

# The built-in manifests and migrations live beside the packages (editable install).
REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


class Settings(BaseSettings):
    """Everything a dlscope process needs to know about its environment."""

    model_config = SettingsConfigDict(env_prefix="DLSCOPE_", frozen=True, extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".dlscope")
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
    # Where the registry's artifact server listens, "host:port"; by default every interface,
    # at the port of artifact_url.
    artifact_listen: str | None = None

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

    def trace_url(self, trace_id: str) -> str:
        return f"{self.jaeger_ui_url.rstrip('/')}/trace/{trace_id}"
