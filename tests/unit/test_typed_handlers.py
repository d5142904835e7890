"""Every service consumes through typed routes: its handlers receive their payload already
validated as its class, and its bindings come from those classes (``shared.messaging.Routes``).
A service that subscribed a bare-envelope handler would be back to unwrapping by hand, and
to listing its types twice; this finds one, naming where."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.config import REPOSITORY_ROOT

SERVICES = sorted((REPOSITORY_ROOT / "services").rglob("*.py"))


def _raw_subscriptions(path: Path) -> list[int]:
    """The lines of ``path`` that call ``.subscribe(`` (the bus's bare-envelope consumer)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "subscribe"
    ]


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: str(p.relative_to(REPOSITORY_ROOT)))
def test_services_subscribe_only_through_typed_routes(path: Path) -> None:
    assert _raw_subscriptions(path) == [], f"{path}: use Bus.handle with Routes"


def test_the_check_finds_a_bare_subscription(tmp_path: Path) -> None:
    sample = tmp_path / "service.py"
    sample.write_text("async def start(bus):\n    await bus.subscribe('q', [], print)\n")
    assert _raw_subscriptions(sample) == [2]
