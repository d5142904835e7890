"""The language-model page's commands, as written, each block on a home of its own where the
zoo has built SmolLM2 (built once for the session: ``smollm2_home``); MiniLM is built on first
use, as the page says."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, SHELLS, Block, blocks
from tests.docs.shell import run_block

pytestmark = pytest.mark.e2e

PAGE = DOCS / "language-models.md"
SHELL_BLOCKS = [block for block in blocks(PAGE) if block.language in SHELLS]


def test_the_page_runs_both_models_and_a_sweep() -> None:
    written = "".join(block.text for block in SHELL_BLOCKS)
    for command in ("dlscope run minilm-l6", "dlscope run smollm2", "dlscope sweep smollm2"):
        assert command in written


def _home_of_its_own(built: Path, home: Path) -> Path:
    """A copy of ``built`` (its database, results) with the zoo's gigabyte hard-linked."""

    def copy(source: str, destination: str) -> None:
        if Path(source).parent.name == "zoo":
            os.link(source, destination)
        else:
            shutil.copy2(source, destination)

    shutil.copytree(built, home, copy_function=copy)
    return home


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda block: block.name)
# The first test to ask for ``smollm2_home`` builds it (about 95 s on two cores), in its setup,
# which the timeout counts.
@pytest.mark.timeout(600)
def test_every_command_of_the_language_model_page_runs_as_written(
    block: Block, smollm2_home: Path, tmp_path: Path
) -> None:
    home = _home_of_its_own(smollm2_home, tmp_path / "home")
    workdir = tmp_path / "work"
    workdir.mkdir()
    shown = " ".join(run_block(block, home, workdir).split())
    if "dlscope run smollm2" in block.text:
        assert "TTFT" in shown
