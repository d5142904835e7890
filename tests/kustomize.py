"""Render a kustomization in Python: the subset of kustomize that deploy/kubernetes uses.

kustomize is not installed on every machine the tests run on (`kubectl kustomize` is where
kubectl is), so the tests render the overlays with this, and compare it with `kubectl
kustomize` where that exists. A field outside the subset is an error, never silently ignored:

- ``resources``: YAML files and directories holding a kustomization;
- ``components``: directories holding a ``kind: Component``, applied at the including level;
- ``patches`` with ``path`` (a file) or ``patch`` (inline): strategic-merge patches, each
  naming its target by kind and name, which is the resource's current name or one it had
  before a ``nameSuffix`` (kustomize matches a patch without ``target`` by any of a
  resource's ids, and wants exactly one match); maps merge, lists of named items merge by
  name, other lists are replaced, null deletes;
- ``namespace``: set on every namespaced resource (a Namespace takes it as its name);
- ``nameSuffix``: appended to every resource's name. Only Deployments are renamed here:
  kustomize also rewrites the references to a renamed resource (a ConfigMap's in an
  envFrom, a Service's in a StatefulSet), which this does not.

They apply in kustomize's order: ``resources``, then ``components`` (a component's own
fields work on everything accumulated so far), then ``patches``, ``namespace`` and
``nameSuffix``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["Resource", "key_of", "render"]

Resource = dict[str, Any]

_SUPPORTED = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "components",
    "patches",
    "nameSuffix",
}
_RENAMED = {"Deployment"}
# Where a resource keeps the names a nameSuffix replaced while it is built (kustomize keeps
# them in an annotation); render() removes it.
_PREVIOUS_NAMES = "__previous_names__"
_CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "PriorityClass",
    "StorageClass",
}


def key_of(resource: Resource) -> tuple[str, str, str]:
    """(kind, namespace, name): what identifies a resource in a rendering."""
    metadata = resource["metadata"]
    return resource["kind"], metadata.get("namespace", ""), metadata["name"]


def render(directory: Path) -> list[Resource]:
    """The resources ``directory``'s kustomization produces."""
    resources = _build(directory, expected="Kustomization")
    for resource in resources:
        resource.pop(_PREVIOUS_NAMES, None)
    return resources


def _documents(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _kustomization(directory: Path, expected: str) -> dict[str, Any]:
    kustomization: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - _SUPPORTED
    if unsupported:
        raise ValueError(f"{directory}: kustomize fields not rendered here: {sorted(unsupported)}")
    if kustomization.get("kind", "Kustomization") != expected:
        raise ValueError(f"{directory}: a {kustomization.get('kind')}, expected a {expected}")
    return kustomization


def _build(
    directory: Path, *, expected: str, including: list[Resource] | None = None
) -> list[Resource]:
    """A component works on the resources of the kustomization ``including`` it."""
    kustomization = _kustomization(directory, expected)
    resources: list[Resource] = list(including or [])
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            resources += _build(path, expected="Kustomization")
        else:
            resources += _documents(path)
    _check_unique(resources, directory)
    for entry in kustomization.get("components", []):
        resources = _build(directory / entry, expected="Component", including=resources)
    for patch in kustomization.get("patches", []):
        for document in _patches(patch, directory):
            _apply(resources, document, directory)
    namespace = kustomization.get("namespace")
    if namespace:
        for resource in resources:
            if resource["kind"] == "Namespace":
                resource["metadata"]["name"] = namespace
            elif resource["kind"] not in _CLUSTER_SCOPED:
                resource["metadata"]["namespace"] = namespace
    suffix = kustomization.get("nameSuffix")
    if suffix:
        _rename(resources, suffix, directory)
    return resources


def _patches(patch: dict[str, Any], directory: Path) -> list[Resource]:
    """The strategic-merge patches one entry of ``patches`` holds."""
    if set(patch) == {"path"}:
        return _documents(directory / patch["path"])
    if set(patch) == {"patch"}:
        return [doc for doc in yaml.safe_load_all(patch["patch"]) if doc is not None]
    raise ValueError(
        f"{directory}: only `patches: - path: FILE` or `- patch: YAML` is rendered here"
    )


def _rename(resources: list[Resource], suffix: str, directory: Path) -> None:
    for resource in resources:
        if resource["kind"] not in _RENAMED:
            raise ValueError(
                f"{directory}: a nameSuffix on a {resource['kind']} is not rendered here"
            )
        resource.setdefault(_PREVIOUS_NAMES, []).append(resource["metadata"]["name"])
        resource["metadata"]["name"] += suffix


def _check_unique(resources: list[Resource], directory: Path) -> None:
    keys = [key_of(r) for r in resources]
    duplicates = {k for k in keys if keys.count(k) > 1}
    if duplicates:
        raise ValueError(f"{directory}: resources defined twice: {sorted(duplicates)}")


def _apply(resources: list[Resource], patch: Resource, directory: Path) -> None:
    if not isinstance(patch, dict) or "kind" not in patch:
        raise ValueError(f"{directory}: only strategic-merge patches are rendered here")
    kind, name = patch["kind"], patch["metadata"]["name"]
    targets = [
        r
        for r in resources
        if r["kind"] == kind and name in [r["metadata"]["name"], *r.get(_PREVIOUS_NAMES, [])]
    ]
    if len(targets) != 1:
        raise ValueError(f"{directory}: a patch of {kind} {name} matches {len(targets)} resources")
    merged = _merge(targets[0], patch)
    targets[0].clear()
    targets[0].update(merged)


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for name, value in patch.items():
            if value is None:
                merged.pop(name, None)
            elif name in merged:
                merged[name] = _merge(merged[name], value)
            else:
                merged[name] = value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        items = {item["name"]: item for item in base}
        for item in patch:
            items[item["name"]] = (
                _merge(items[item["name"]], item) if item["name"] in items else item
            )
        return list(items.values())
    return patch


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)
