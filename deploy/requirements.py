"""Print the requirements of dlscope's base install plus the extras named, one a line, from
pyproject.toml, with the extras' references to other extras (`dlscope[worker]`) followed.

    python deploy/requirements.py                       # the control plane
    python deploy/requirements.py onnxruntime,loadgen   # an onnxruntime worker

The images install these in a layer of their own before the source is copied, so a change
of code rebuilds an image in seconds rather than reinstalling its framework. Standard
library only: it runs in the bare Python image.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: list[str], project: dict[str, Any]) -> list[str]:
    """The base requirements and those of ``extras``, in order, each once."""
    optional: dict[str, list[str]] = project["optional-dependencies"]
    found: list[str] = list(project["dependencies"])
    pending = list(extras)
    seen: set[str] = set()
    while pending:
        extra = pending.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in {PYPROJECT}; there are: {', '.join(optional)}")
        seen.add(extra)
        for requirement in optional[extra]:
            name, _, rest = requirement.partition("[")
            if name.strip() == "dlscope":
                pending += rest.rstrip("]").split(",")
            elif requirement not in found:
                found.append(requirement)
    return found


def main(argv: list[str]) -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = [e for arg in argv for e in arg.split(",") if e]
    print("\n".join(requirements(extras, project)))


if __name__ == "__main__":
    main(sys.argv[1:])
