"""Settings are read once and passed down (STYLE.md, 9): no module of dlscope but
``shared/config.py`` reads or writes the process's environment, or reads settings of its own
from it. A module that needs a setting is handed it; a child process is told its settings
(the framework process over its connection) or given an environment made by
``shared.config.child_environment``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.config import REPOSITORY_ROOT

PACKAGES = ("shared", "services", "dlscope", "harness")
ALLOWED = REPOSITORY_ROOT / "shared" / "config.py"
OS_ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def _modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (REPOSITORY_ROOT / package).rglob("*.py")
        if path != ALLOWED
    )


def environment_uses(source: str) -> list[str]:
    """Where ``source`` touches the environment: ``os.environ`` and its kin, however they are
    imported, and settings classes that read it themselves."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in OS_ENVIRONMENT
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(f"line {node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [
                f"line {node.lineno}: from os import {alias.name}"
                for alias in node.names
                if alias.name in OS_ENVIRONMENT
            ]
        elif isinstance(node, ast.ClassDef):
            bases = [
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            ]
            if "BaseSettings" in bases:
                found.append(f"line {node.lineno}: class {node.name}(BaseSettings)")
    return found


def test_the_check_sees_every_way_of_reaching_the_environment() -> None:
    source = (
        "import os\nfrom os import environ, getenv\n"
        "a = os.environ.get('X')\nos.environ['Y'] = '1'\nb = os.getenv('Z')\n"
        "class S(BaseSettings): pass\n"
    )
    assert len(environment_uses(source)) == 6
    assert environment_uses("import os\npath = os.path.join('a', 'b')\n") == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPOSITORY_ROOT)))
def test_no_module_but_the_settings_reads_or_writes_the_environment(path: Path) -> None:
    found = environment_uses(path.read_text())
    assert not found, (
        f"{path.relative_to(REPOSITORY_ROOT)} touches the environment ({'; '.join(found)}): "
        "read the setting in shared.config.Settings and pass it down"
    )
