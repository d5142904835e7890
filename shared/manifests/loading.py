"""Reading manifests from YAML files, with errors that name the file and the field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

import yaml
from packaging.version import Version
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from shared.errors import ManifestError
from shared.inputs import unsafe_text
from shared.manifests.dataset import DatasetManifest
from shared.manifests.fields import MANIFEST_DIR, UNION_TAGS
from shared.manifests.framework import FrameworkManifest
from shared.manifests.kinds import MANIFEST_KINDS, Manifest, kind_of
from shared.manifests.model import ModelManifest
from shared.manifests.steps import INPUT_OPS, OUTPUT_OPS

__all__ = ["MAX_MANIFEST_NODES", "load_manifest", "load_manifests", "parse_manifest", "read_yaml"]

# The default bound on a manifest's YAML nodes (DLSCOPE_MAX_MANIFEST_NODES): a classifier's
# labels written out (ImageNet-21k's 21 841 names) fit many times over.
MAX_MANIFEST_NODES = 200_000
# Problems a refusal lists: the first few say what to fix; thousands would bury them.
_LISTED = 10

M = TypeVar("M", ModelManifest, FrameworkManifest, DatasetManifest)


def load_manifest(path: Path) -> Manifest:
    """The manifest in the YAML file ``path``, of whichever kind it declares.

    Relative paths inside it are made absolute against its folder; plugin steps must be
    installed and labels files must exist. ``ManifestError`` names the file and the field.
    """
    try:
        data = read_yaml(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
    return parse_manifest(data, origin=str(path), directory=path.parent)


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, bounded, and with every ``sha256`` kept as the text it is written as.

    A digest of digits only would otherwise be read as a number (and one with leading zeros
    could not be told back from it): taken as written, it validates as the string it is.

    Aliases are refused: a few hundred bytes of anchors and aliases can stand for millions of
    nodes (a "billion laughs"), and a manifest has no need of them. The nodes of the document
    are counted as they are composed, so a large one stops at ``max_nodes`` rather than after
    it has filled the memory.
    """

    max_nodes = MAX_MANIFEST_NODES
    _nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            alias = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases (*{alias.anchor}) are not accepted in a manifest: write the value out",
                alias.start_mark,
            )
        self._nodes += 1
        if self._nodes > self.max_nodes:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"the document has more than {self.max_nodes} nodes (DLSCOPE_MAX_MANIFEST_NODES)",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        for key, value in node.value:
            if (
                isinstance(key, yaml.ScalarNode)
                and key.value == "sha256"
                and isinstance(value, yaml.ScalarNode)
                and value.tag in (_INT, _FLOAT)
            ):
                value.tag = _STR
        return super().construct_mapping(node, deep=deep)


_INT, _FLOAT, _STR = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "str"))


def read_yaml(text: str | bytes, *, max_nodes: int = MAX_MANIFEST_NODES) -> Any:
    """A YAML document as ``yaml.safe_load`` reads it, every ``sha256`` kept as text; without
    aliases and with at most ``max_nodes`` nodes (``yaml.YAMLError`` says which was passed)."""
    loader = _Loader(text)
    loader.max_nodes = max_nodes
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_manifest(data: object, *, origin: str, directory: Path | None = None) -> Manifest:
    """The manifest ``data`` (a mapping, as read from YAML or JSON) describes.

    ``origin`` starts every error message (a file name, ``"submitted manifest"``). With
    ``directory``, relative paths are resolved against it and plugins and labels files are
    checked on this host, as for a file; without it, the manifest is taken as it is.
    """
    if not isinstance(data, dict):
        raise ManifestError(f"{origin}: a manifest must be a YAML mapping")
    problem = unsafe_text(data)
    if problem is not None:
        where = ".".join(str(p) for p in problem[0]) or "<root>"
        raise ManifestError(f"{origin}: {where}: the text holds {problem[1]}")
    # Dispatch on `kind` here rather than through the union, so error paths start at the
    # manifest's own fields (inputs.0...) rather than at the union's tag (model.inputs.0...).
    kind = kind_of(data)
    schema = MANIFEST_KINDS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        kinds = ", ".join(repr(k) for k in MANIFEST_KINDS)
        raise ManifestError(f"{origin}: kind: {kind!r} is not a kind of manifest (use {kinds})")
    context = None if directory is None else {MANIFEST_DIR: directory}
    try:
        return schema.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = "; ".join(_describe(err) for err in errors[:_LISTED])
        more = f"; and {len(errors) - _LISTED} more" if len(errors) > _LISTED else ""
        raise ManifestError(f"{origin}: {problems}{more}") from exc


@overload
def load_manifests(directory: Path) -> list[Manifest]: ...
@overload
def load_manifests(directory: Path, kind: type[M]) -> list[M]: ...
def load_manifests(directory: Path, kind: type[Any] | None = None) -> list[Any]:
    """Every manifest under ``directory`` (``*.yaml``/``*.yml``), sorted by (kind, name,
    version); only those of class ``kind`` when it is given (``ModelManifest``, ...).

    All files are read and checked either way: a (kind, name, version) defined twice is refused
    because a version is immutable, and two different contents would make it ambiguous.
    """
    paths = sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")])
    manifests = [load_manifest(p) for p in paths]
    seen: dict[tuple[str, str, str], Path] = {}
    for manifest, path in zip(manifests, paths, strict=True):
        key = (manifest.kind, manifest.name, manifest.version)
        if key in seen:
            raise ManifestError(
                f"{path}: {manifest.kind} {manifest.ref} is also defined in {seen[key]}"
            )
        seen[key] = path
    ordered = sorted(manifests, key=lambda m: (m.kind, m.name, Version(m.version)))
    return ordered if kind is None else [m for m in ordered if isinstance(m, kind)]


def _describe(err: ErrorDetails) -> str:
    loc = _without_tags(err["loc"])
    message = err["msg"]
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # The op names a step; say which ones exist rather than pydantic's "tag" wording.
        ops = ", ".join(INPUT_OPS if loc[:1] == ("inputs",) else OUTPUT_OPS)
        tag = err.get("ctx", {}).get("tag")
        message = f"unknown op {tag!r} (the ops: {ops})" if tag else f"missing (the ops: {ops})"
        loc = (*loc, "op")
    where = ".".join(str(p) for p in loc)
    return f"{where}: {message}" if where else message


def _without_tags(loc: Sequence[int | str]) -> tuple[int | str, ...]:
    # pydantic puts the tag of a union member in the path (inputs.0.steps.1.resize.method);
    # the file has no such level, so drop it: inputs.0.steps.1.method.
    kept: list[int | str] = []
    for position, part in enumerate(loc):
        after_step = position >= 2 and loc[position - 2] == "steps"
        if part in UNION_TAGS or (after_step and isinstance(loc[position - 1], int)):
            continue
        kept.append(part)
    return tuple(kept)
