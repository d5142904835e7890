"""What a service keeps of the registry's answers: an exact version's for good, a constraint's
until its artifact changes or its time is up, and never a miss."""

from __future__ import annotations

from harness.payloads import model_manifest
from services.registry import Catalog
from shared.artifacts.resolutions import Resolutions, exactly
from shared.manifests import ModelManifest
from shared.messages import ResolvedArtifact


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def found(manifest: ModelManifest) -> ResolvedArtifact:
    return ResolvedArtifact(manifest=manifest)


def test_a_constraint_is_kept_until_its_artifact_changes_or_its_time_is_up() -> None:
    clock, model = Clock(), model_manifest()
    kept = Resolutions(ttl_s=30, clock=clock)
    kept.put("model", model.name, "*", found(model))
    assert kept.get("model", model.name, "*") == found(model)
    kept.forget("model", model.name)  # a version registered or deprecated
    assert kept.get("model", model.name, "*") is None
    kept.put("model", model.name, "*", found(model))
    clock.now = 30.0
    assert kept.get("model", model.name, "*") is None  # one it never heard of: bounded


def test_an_exact_version_is_kept_for_good_and_a_miss_never() -> None:
    clock, model = Clock(), model_manifest()
    kept = Resolutions(ttl_s=0, clock=clock)  # as the scheduler keeps them: exact ones only
    pinned = exactly(model.version)
    kept.put("model", model.name, pinned, found(model))
    kept.put("model", model.name, "*", found(model))
    kept.forget("model", model.name)
    clock.now = 1e9
    assert kept.get("model", model.name, pinned) == found(model)
    assert kept.get("model", model.name, "*") is None
    kept.put("model", "absent", "*", ResolvedArtifact(error="unknown model", problem="unknown"))
    assert kept.get("model", "absent", "*") is None


def test_the_oldest_answers_go_past_the_size() -> None:
    model = model_manifest()
    kept = Resolutions(ttl_s=30, size=2)
    for constraint in ("*", ">=1", ">=0"):
        kept.put("model", model.name, constraint, found(model))
    assert kept.get("model", model.name, "*") is None
    assert kept.get("model", model.name, ">=0") is not None


def test_a_deprecated_version_pinned_as_services_pin_it_still_resolves() -> None:
    """What the gateway accepted is what the scheduler schedules, deprecated meanwhile or not."""
    catalog = Catalog()
    for version in ("1.0.0", "1.1.0"):
        catalog.learn(model_manifest(version=version))
    catalog.learn_deprecation("model", "net", "1.1.0", "bad weights")
    assert catalog.resolve("model", "net", "*").version == "1.0.0"
    assert catalog.resolve("model", "net", exactly("1.1.0")).version == "1.1.0"
