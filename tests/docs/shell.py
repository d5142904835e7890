"""Running a page's shell block as a reader would: in a fresh shell, with ``dlscope`` on the
PATH (as after ``. .venv/bin/activate``), on the embedded default, in a ``DLSCOPE_HOME`` of the
test's own and no other ``DLSCOPE_`` setting.

A block that builds or activates the virtualenv (``make``, ``.venv``) runs in the clone's root,
where the Makefile is; any other block in a folder of the test's own, the reader's working
folder, so what its commands write stays there. Each command of a block must end as a
completed evaluation does (``COMPLETED``: VALID, INVALID, INVALID with failed requests): a
verdict is about the machine the test runs on, and the docs' examples run few queries on
purpose; anything else (a failure, 1; a command line the code refuses, 2) fails the test,
naming the command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT
from tests.docs.pages import Block, commands

__all__ = ["run_block"]

# Set by a `make test` that runs this suite; a `make run` inside it is a make of its own.
_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def run_block(block: Block, home: Path, workdir: Path, timeout: float = 280) -> str:
    """Run every command of ``block``, in order, in one shell; its output, for the asserts."""
    script = "\n".join(_checked(command) for command in commands(block.text))
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_") and k not in _MAKE
    }
    venv = Path(sys.executable).parent
    environment.update(
        DLSCOPE_HOME=str(home),
        PATH=f"{venv}{os.pathsep}{environment.get('PATH', '')}",
        VIRTUAL_ENV=str(venv.parent),
        COLUMNS="120",
    )
    in_clone = "make " in block.text or ".venv" in block.text
    ran = subprocess.run(
        ["bash", "-c", script],
        cwd=REPOSITORY_ROOT if in_clone else workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert ran.returncode == 0, f"{block.name}: {ran.stderr[-4000:]}\n{ran.stdout[-4000:]}"
    return ran.stdout


def _checked(command: str) -> str:
    """``command``, then a check of how it ended that stops the block, naming it."""
    accepted = " ".join(str(status) for status in sorted(COMPLETED))
    said = shlex.quote(f"the command `{command}` exited")
    return (
        f"{command}\n"
        "status=$?\n"
        f'case " {accepted} " in *" $status "*) ;; '
        f'*) echo {said} "$status" >&2; exit 100 ;; esac'
    )
