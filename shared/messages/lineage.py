"""Which registered models are the same model exported for other frameworks.

A manifest names one framework, so one trained model exported three times is three manifests
(``digits-cnn`` for onnxruntime, ``digits-cnn-torch`` for pytorch, ``digits-cnn-tf`` for
tensorflow). An experiment request lists them; the gateway and the CLI fill that list in
from one name with ``exports_of``.

Two manifests are exports of the same model when they have the same version and task, the
same input and output tensors (names, element types, shapes) and the same
``attributes.training_dataset``, one that names real training data: a model without it (or
with ``none``, as for placeholder weights) is only ever the same as itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from shared.errors import ModelNotFound
from shared.manifests import SERVED_BY, ModelManifest, TensorSpec
from shared.messages.experiment import FrameworkSelection

__all__ = ["experiment_models", "exports_of"]


def experiment_models(
    model: ModelManifest, registered: Iterable[ModelManifest], frameworks: FrameworkSelection
) -> list[ModelManifest]:
    """The models an experiment of ``model`` on ``frameworks`` compares, ``model`` first
    when its framework is among them. ``ModelNotFound`` names a framework asked for that has
    no export, or several."""
    exports = exports_of(model, registered)
    wanted = list(exports) if frameworks == "all" else list(frameworks)
    known = ", ".join(f"{m.name} ({f})" for f, found in exports.items() for m in found)
    missing = [f for f in wanted if f not in exports]
    if missing:
        raise ModelNotFound(
            f"{model.ref} has no export for {', '.join(missing)}; its exports: {known}"
        )
    for framework in wanted:
        if len(exports[framework]) > 1:
            names = ", ".join(m.ref for m in exports[framework])
            raise ModelNotFound(
                f"several models are {model.ref} for {framework} ({names}): "
                "name the models to compare explicitly"
            )
    wanted.sort(key=lambda f: f != model.framework.name)  # stable: the rest keep their order
    # A served model is the model itself (on an endpoint worker): listed once.
    return list({m.ref: m for m in (exports[f][0] for f in wanted)}.values())


def exports_of(
    model: ModelManifest, registered: Iterable[ModelManifest]
) -> dict[str, list[ModelManifest]]:
    """Per framework, the exports of ``model`` among ``registered``: ``model`` alone for its
    own framework, first; more than one for a framework means the choice is ambiguous."""
    found: dict[str, list[ModelManifest]] = {model.framework.name: [model]}
    if model.served:
        found[SERVED_BY] = [model]
    key = _lineage(model)
    if key is None:
        return found
    for other in registered:
        framework = other.framework.name
        same = framework != model.framework.name and _lineage(other) == key
        if same and other.ref not in {m.ref for m in found.get(framework, [])}:
            found.setdefault(framework, []).append(other)
    return found


def _lineage(manifest: ModelManifest) -> Hashable | None:
    training = manifest.attributes.get("training_dataset")
    if not isinstance(training, str) or training.strip().lower() in ("", "none"):
        return None
    return (
        manifest.version,
        manifest.task,
        training,
        tuple(_signature(spec) for spec in manifest.inputs),
        tuple(_signature(spec) for spec in manifest.outputs),
    )


def _signature(spec: TensorSpec) -> Hashable:
    return (spec.name, spec.element_type, tuple(spec.shape))
