"""What the launch form offers: each registered model with its versions and its exports to
other frameworks (to evaluate "this model" on one of them), each dataset with its splits."""

from __future__ import annotations

from typing import Any

from shared.eventstore import ArtifactView
from shared.manifests import ModelManifest
from shared.messages import exports_of

__all__ = ["catalog"]


def catalog(artifacts: list[ArtifactView]) -> dict[str, Any]:
    manifests = [m for a in artifacts if (m := a.model_manifest()) is not None]
    models: dict[str, Any] = {}
    for view in artifacts:
        if view.kind != "model":
            continue
        entry = models.setdefault(
            view.name,
            {"framework": view.framework, "task": view.task, "versions": [], "exports": {}},
        )
        entry["versions"].append({"version": view.version, "deprecated": view.deprecated})
        manifest = view.model_manifest()
        if manifest is not None and not view.deprecated:
            entry["exports"] |= _exports(manifest, manifests)
    datasets: dict[str, Any] = {}
    for view in artifacts:
        if view.kind == "dataset":
            splits = sorted((view.manifest.get("splits") or {}).keys())
            datasets.setdefault(view.name, {"splits": splits})
    return {"models": models, "datasets": datasets}


def _exports(model: ModelManifest, registered: list[ModelManifest]) -> dict[str, str]:
    return {
        framework: found[0].name
        for framework, found in exports_of(model, registered).items()
        if len(found) == 1
    }
