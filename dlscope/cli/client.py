"""One interface from the command line to dlscope, wherever dlscope runs.

Every command that reads or asks something (models, zoo, report, layers, run, submit) talks
to a ``Client``: ``EmbeddedClient`` runs the services it needs in this process on the
in-memory broker and the SQLite store under DLSCOPE_HOME; ``HttpClient`` asks a running
deployment's gateway. The commands themselves never branch on where dlscope runs: they take
their client from ``dlscope.cli.target``, which chooses. This module holds only what both
clients answer with, so each imports it and neither imports the other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.manifests import ModelManifest
from shared.messages import (
    DeviceLease,
    EvaluationRequested,
    ExperimentComparison,
    ExperimentRequested,
    ProfiledLevel,
)

__all__ = [
    "LAYERS_TOP",
    "REPORT_FORMATS",
    "Client",
    "Compared",
    "Evaluated",
    "LayersWanted",
    "ModelFilter",
    "ModelRow",
]

# What ``Client.report`` writes, each a self-contained file.
REPORT_FORMATS = ("html", "csv", "md")
# The slowest layers a command lists unless asked for more (``dlscope layers --top``).
LAYERS_TOP = 10


@dataclass(frozen=True)
class ModelFilter:
    """Which registered model versions ``dlscope models list`` asks for: None matches any."""

    name: str | None = None
    framework: str | None = None
    task: str | None = None
    include_deprecated: bool = False


@dataclass(frozen=True)
class LayersWanted:
    """The layer breakdown ``dlscope layers`` asks for: ``evaluation_id``'s ``top`` layers
    (of one pass, or of each), lined up with ``others``' layers."""

    evaluation_id: uuid.UUID
    others: list[uuid.UUID]
    top: int
    level: ProfiledLevel | None


@dataclass(frozen=True)
class ModelRow:
    """One registered model version, as ``dlscope models list`` shows it."""

    name: str
    version: str
    framework: str | None
    task: str | None
    deprecated: bool
    description: str


@dataclass(frozen=True)
class Evaluated:
    """A settled evaluation: as ``GET /v1/evaluations/{id}`` shows it, what ``--json``
    writes, and where its events and trace are (when the client knows)."""

    evaluation_id: uuid.UUID
    evaluation: dict[str, Any]
    document: dict[str, Any]
    footer: str | None = None
    # Its layer breakdown (a ``LayerReport`` as JSON) when it was profiled.
    layers: dict[str, Any] | None = None


@dataclass(frozen=True)
class Compared:
    """A settled experiment's comparison, the device windows its members measured in, and
    the frameworks with an export of the model that could not run here."""

    model: str
    hardware: str
    comparison: ExperimentComparison | None
    error: str | None
    experiment_id: uuid.UUID
    document: dict[str, Any]
    windows: dict[uuid.UUID, DeviceLease] = field(default_factory=dict)
    not_installed: dict[str, str] = field(default_factory=dict)
    footer: str | None = None
    # Each profiled member's layer breakdown (a ``LayerReport`` as JSON), by evaluation.
    layers: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)


class Client(Protocol):
    """What the command line asks of dlscope. A method that cannot answer fails the command
    with the reason (``dlscope.cli.terminal.fail``)."""

    def models(self, wanted: ModelFilter) -> list[ModelRow]: ...

    def register(self, manifest: ModelManifest, what: str) -> bool:
        """Register ``manifest``; whether it is new (False: registered already, unchanged)."""
        ...

    def deprecate(self, name: str, version: str, reason: str) -> None: ...

    def report(self, keys: list[uuid.UUID]) -> dict[str, str]:
        """The report of these evaluations and experiments: format (html, csv, md) → text."""
        ...

    def layers(self, wanted: LayersWanted) -> dict[str, Any]:
        """The layer breakdown of an evaluation (a ``LayerReport`` as JSON)."""
        ...

    def evaluate(self, request: EvaluationRequested, *, wait: bool) -> Evaluated | None:
        """Run ``request``; its outcome, or None when not waiting for it."""
        ...

    def experiment(self, request: ExperimentRequested, *, wait: bool) -> Compared | None:
        """Run ``request``; its comparison, or None when not waiting for it."""
        ...
