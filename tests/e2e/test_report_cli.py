"""``dlscope report`` on the embedded home, as a user runs it: after ``dlscope run``, one
self-contained HTML file (no script, nothing loaded from anywhere, every chart inline as SVG)
with the same numbers as CSV and Markdown; ids it cannot use are refused, saying why."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT

pytestmark = [pytest.mark.e2e]


def dlscope(home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env={**os.environ, "DLSCOPE_HOME": str(home), "COLUMNS": "200"},
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_then_its_report_in_three_forms(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = dlscope(home, "run", "squeezenet", "-n", "100", "--min-duration", "0", "--warmup", "4")
    assert run.returncode in COMPLETED, run.stderr
    # The progress went to stderr, the result to stdout.
    assert "squeezenet on onnxruntime: completed" in run.stderr
    found = re.search(r"evaluation ([0-9a-f-]{36})", run.stdout)
    assert found is not None, run.stdout
    evaluation_id = found.group(1)

    base = tmp_path / "out" / "squeezenet"
    base.parent.mkdir()
    written = dlscope(home, "report", evaluation_id, "-o", str(base))
    assert written.returncode == 0, written.stderr
    html = base.with_suffix(".html").read_text()
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["']?https?://(?!localhost)""", html)
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg"') >= 4
    assert evaluation_id in html
    rows = list(csv.DictReader(base.with_suffix(".csv").read_text().splitlines()))
    assert [row["evaluation_id"] for row in rows] == [evaluation_id]
    assert int(rows[0]["queries"]) >= 100
    assert "## Evaluation: squeezenet on onnxruntime (cpu)" in base.with_suffix(".md").read_text()


def test_ids_it_cannot_use_are_refused_saying_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        dlscope(home, "run", "squeezenet", "-n", "1", "--min-duration", "0").returncode in COMPLETED
    )
    not_an_id = dlscope(home, "report", "last-week")
    assert not_an_id.returncode == 2
    assert "not an evaluation or experiment id: 'last-week'" in not_an_id.stderr
    unknown = dlscope(home, "report", "0b9f3f5e-6a41-4b7c-8d7e-1c2a3b4c5d6e")
    assert unknown.returncode == 1
    assert "no evaluation or experiment 0b9f3f5e-6a41-4b7c-8d7e-1c2a3b4c5d6e" in unknown.stderr
    nowhere = dlscope(home, "report", "0b9f3f5e-6a41-4b7c-8d7e-1c2a3b4c5d6e", "-o", "/no/dir/x")
    assert nowhere.returncode == 2
    assert "--output: no directory /no/dir" in nowhere.stderr
