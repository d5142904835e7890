"""The registry resolves a name and a version constraint to the highest matching manifest."""

from __future__ import annotations

import pytest

from harness.payloads import model_manifest
from services.registry import Catalog
from shared.errors import ModelNotFound
from shared.manifests import ModelManifest


def manifest(name: str, version: str) -> ModelManifest:
    return model_manifest(name, version)


def catalog_of(*manifests: ModelManifest) -> Catalog:
    catalog = Catalog()
    for m in manifests:
        catalog.learn(m)
    return catalog


CATALOG = catalog_of(
    manifest("net", "1.0.0"),
    manifest("net", "1.4.2"),
    manifest("net", "2.0.0"),
    manifest("other", "0.1.0"),
)


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [("*", "2.0.0"), ("", "2.0.0"), (">=1,<2", "1.4.2"), ("==1.0.0", "1.0.0"), ("~=1.0", "1.4.2")],
)
def test_resolves_the_highest_version_that_satisfies_the_constraint(
    constraint: str, expected: str
) -> None:
    assert CATALOG.resolve("model", "net", constraint).version == expected


def test_an_unknown_model_names_the_models_that_exist() -> None:
    with pytest.raises(ModelNotFound, match=r"unknown model 'nope'; registered models: net, other"):
        CATALOG.resolve("model", "nope")


def test_an_unsatisfiable_constraint_lists_the_available_versions() -> None:
    with pytest.raises(ModelNotFound, match=r"satisfies '>=3'; available: 1.0.0, 1.4.2, 2.0.0"):
        CATALOG.resolve("model", "net", ">=3")


def test_a_malformed_constraint_is_refused_with_the_syntax_to_use() -> None:
    with pytest.raises(ModelNotFound, match="is not a version constraint"):
        CATALOG.resolve("model", "net", "about one")


def test_kinds_are_separate_namespaces() -> None:
    catalog = catalog_of(manifest("digits", "1.0.0"))
    with pytest.raises(ModelNotFound, match=r"unknown dataset 'digits'; registered datasets: none"):
        catalog.resolve("dataset", "digits")
