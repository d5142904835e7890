"""The documentation site builds with mkdocs, strictly: a link to a page or an anchor that
does not exist, or a page left out of the navigation, fails the build (mkdocs.yml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared.config import REPOSITORY_ROOT
from tests.docs.pages import DOCS


def test_the_site_builds_with_no_broken_link_and_every_page_in_its_navigation(
    tmp_path: Path,
) -> None:
    # Not --quiet: it silences the warnings strict mode fails on, and the build passes.
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPOSITORY_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    for page in DOCS.glob("*.md"):
        name = "" if page.stem == "index" else f"{page.stem}/"
        assert (tmp_path / name / "index.html").exists(), page.name
    assert (tmp_path / "images" / "evaluation.png").exists()


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository() -> None:
    import re

    readme = (REPOSITORY_ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert "docs/images/evaluation.png" in local
    missing = [t for t in local if not (REPOSITORY_ROOT / t).exists()]
    assert not missing, missing
