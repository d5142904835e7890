"""Registry: model manifests and their versions."""

from services.registry.catalog import Catalog
from services.registry.service import RegistryService

__all__ = ["Catalog", "RegistryService"]
