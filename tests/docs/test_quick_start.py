"""The quick start's commands, as written, on a fresh home: ``make run``, then the first
evaluations (``digits-cnn`` built on first use, as a newcomer's first run builds it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, SHELLS, Block, blocks
from tests.docs.shell import run_block

pytestmark = [pytest.mark.e2e, pytest.mark.zoo]

PAGE = DOCS / "quick-start.md"
SHELL_BLOCKS = [block for block in blocks(PAGE) if block.language in SHELLS]


def test_the_quick_start_installs_runs_and_compares() -> None:
    written = "".join(block.text for block in SHELL_BLOCKS)
    for command in ("make run", ". .venv/bin/activate", "--framework all"):
        assert command in written


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda block: block.name)
def test_every_command_of_the_quick_start_runs_as_written(block: Block, tmp_path: Path) -> None:
    home, workdir = tmp_path / "home", tmp_path / "work"
    workdir.mkdir()
    shown = " ".join(run_block(block, home, workdir).split())
    if "make run" in block.text:
        # Where the page says the whole result is written.
        result = json.loads((home / "last-run.json").read_text())
        assert result["evaluation"]["status"] == "completed"
        assert result["evaluation"]["result"]["count"] >= 1024
    if "--framework all" in block.text:
        assert "parity" in shown
