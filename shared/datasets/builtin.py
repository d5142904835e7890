"""The providers of built-in data sets, by the name a manifest's ``builtin:`` gives."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from shared.datasets.dlscope_text import DlscopeText
from shared.datasets.provider import BuiltinData, Provider
from shared.datasets.scikit_image import ScikitImage
from shared.datasets.scikit_learn import ScikitLearn
from shared.errors import ArtifactError

__all__ = ["PROVIDERS", "BuiltinData", "Provider", "load_builtin"]

# Fixed rather than discovered from entry points: a built-in data set is pinned by a
# package dlscope itself depends on, so the list changes only with dlscope's dependencies.
PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {"sklearn": ScikitLearn(), "skimage": ScikitImage(), "dlscope": DlscopeText()}
)


def load_builtin(builtin: str) -> BuiltinData:
    """Every sample of the built-in data set ``"<provider>:<name>"``.

    ``ArtifactError`` when there is no such provider or data set; it names those there are.
    """
    provider_name, _, name = builtin.partition(":")
    provider = PROVIDERS.get(provider_name)
    if provider is None:
        raise ArtifactError(
            f"builtin {builtin!r}: no data set provider {provider_name!r} "
            f"(providers: {', '.join(sorted(PROVIDERS))})"
        )
    if name not in provider.names:
        raise ArtifactError(
            f"builtin {builtin!r}: {provider_name} has no data set {name!r} "
            f"({provider_name} data sets: {', '.join(provider.names)})"
        )
    return provider.load(name)
