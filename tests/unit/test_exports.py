"""Each package says what it exports: its ``__init__`` has an ``__all__`` that names only what
the package binds, and every public function, class and constant the ``__init__`` itself
defines. A reader of ``__all__`` sees the package's surface; a stale or forgotten name is
caught here. (What an ``__init__`` imports for its own use is not exported by that alone.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.config import REPOSITORY_ROOT

PRODUCT = ("dlscope", "services", "shared")
PACKAGES = sorted(
    path
    for root in PRODUCT
    for path in (REPOSITORY_ROOT / root).rglob("__init__.py")
    if path.read_text().strip()  # an empty __init__ binds nothing
)


def _names(module: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module's top level imports, and those it defines itself."""
    imported: set[str] = set()
    defined: set[str] = set()
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            imported |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    return imported, defined - {"__all__"}


def _declared(module: ast.Module) -> list[str] | None:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            return list(value)
    return None


def test_there_are_packages_to_check() -> None:
    assert len(PACKAGES) > 20


@pytest.mark.parametrize(
    "init", PACKAGES, ids=[str(p.parent.relative_to(REPOSITORY_ROOT)) for p in PACKAGES]
)
def test_a_package_exports_exactly_what_its_all_lists(init: Path) -> None:
    module = ast.parse(init.read_text())
    declared = _declared(module)
    imported, defined = _names(module)
    public = {name for name in defined if not name.startswith("_")}
    if declared is None:
        assert not public | imported, f"{init} binds names without an __all__"
        return
    assert len(declared) == len(set(declared)), f"{init}: __all__ repeats a name"
    assert set(declared) - imported - defined == set(), f"{init}: __all__ names what it lacks"
    assert public - set(declared) == set(), f"{init}: defines public names __all__ leaves out"
