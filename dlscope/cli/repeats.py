"""Repetitions and comparisons on the command line.

``dlscope run ... --repeat N`` runs the same configuration N times, each in a fresh process
(a new interpreter, a new framework session: what a user re-running a benchmark gets), and
reports how much the runs spread. ``dlscope compare A.json B.json`` says whether two results
written with ``--json`` differ by more than their noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress

from dlscope.cli.fitting import Column, Fitted
from dlscope.cli.live import LINES_ENV, LiveEvaluations, columns, parse_line
from dlscope.cli.machine import run_cells
from dlscope.cli.outcome import COMPLETED, EXIT_INVALID, worst
from dlscope.cli.terminal import console, errors, fail
from shared.config import child_environment
from shared.measurement import RepetitionSummary, compare, summarize_repetitions
from shared.measurement.validity import ValidityThresholds

__all__ = ["DEFAULT_MAX_SPREAD", "compare_command", "run_arguments", "run_repeated"]

# The spread of the repeats' medians past which one run is not to be trusted alone.
DEFAULT_MAX_SPREAD = ValidityThresholds().max_repetition_cv


def _latencies(document: dict[str, Any], source: str) -> tuple[list[int], float]:
    """The headline phase's raw latencies of a result written by ``dlscope run --json``, and
    its headline percentile."""
    try:
        measured = next(
            e["payload"] for e in document["events"] if e["type"] == "evaluation.measured"
        )
        run = measured["run"]
        percentile = document["evaluation"]["result"]["statistics"][0]["headline"]["percentile"]
    except (KeyError, StopIteration, TypeError, IndexError) as exc:
        raise fail(
            f"{source}: not a completed native-driver result of `dlscope run --json` "
            f"(missing {exc})",
            2,
        ) from exc
    if run is None:
        raise fail(f"{source}: a loadgen-driver result keeps no raw latencies to compare", 2)
    return list(run["phases"][0]["latencies_ns"]), float(percentile)


def run_arguments(argv: list[str]) -> list[str]:
    """The arguments of this ``dlscope run`` without ``--repeat``, ``--max-spread`` and
    ``--json`` (each repetition writes its own result), to run it again."""
    arguments = argv[argv.index("run") + 1 :]
    ours = ("--repeat", "--max-spread", "--json")
    kept: list[str] = []
    skip = False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in ours:
            skip = True
        elif not argument.startswith(tuple(f"{option}=" for option in ours)):
            kept.append(argument)
    return kept


def _run_child(command: list[str], live: LiveEvaluations) -> tuple[int, str]:
    """Run one repetition, drawing its progress (the lines it writes for us on stderr) in
    ``live``; its exit status and the rest of its stderr."""
    environment = child_environment(**{LINES_ENV: "lines"})
    rest: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=environment
    ) as child:
        assert child.stderr is not None
        for line in child.stderr:
            event = parse_line(line)
            if event is None:
                rest.append(line)
            else:
                live.observe(*event)
    live.forget()
    return child.returncode, "".join(rest)


def run_repeated(
    arguments: list[str], repeats: int, *, max_spread: float = DEFAULT_MAX_SPREAD
) -> None:
    """Run ``dlscope run <arguments>`` ``repeats`` times, each in its own process; flag a
    spread of their medians over ``max_spread``, naming the run farthest from the others."""
    runs: list[list[int]] = []
    extra: list[list[str]] = []  # each run's CPU per query and verdict
    statuses: list[int] = []  # an INVALID run is a run: its spread counts, its status too
    percentile = 0.9
    with (
        tempfile.TemporaryDirectory(prefix="dlscope-repeat-") as scratch,
        Progress(*columns(), console=errors) as bar,
    ):
        # Runs take alike: the time left is the mean of those done times those to come.
        task = bar.add_task(f"{repeats} runs, each in a fresh process", total=repeats)
        for number in range(1, repeats + 1):
            result = Path(scratch) / f"{number}.json"
            bar.update(task, description=f"run {number} of {repeats}, in a fresh process")
            status, stderr = _run_child(
                [sys.executable, "-m", "dlscope", "run", *arguments, "--json", str(result)],
                LiveEvaluations(bar),
            )
            bar.advance(task)
            if status not in COMPLETED:
                raise fail(f"run {number} of {repeats} failed: {stderr.strip()}", 1)
            statuses.append(status)
            document = json.loads(result.read_text())
            latencies, percentile = _latencies(document, f"run {number}")
            runs.append(latencies)
            extra.append(run_cells(document["evaluation"]["result"]))
    summary = summarize_repetitions(runs, percentile=percentile)
    console.print(_runs_table(arguments, summary, extra))
    for line in _spread_lines(summary, max_spread):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    if status := worst(statuses):
        raise typer.Exit(status)


def _runs_table(arguments: list[str], summary: RepetitionSummary, extra: list[list[str]]) -> Fitted:
    """A row (a block, where narrow) per run: its p50, its headline, its cost and verdict."""
    name = f"p{summary.percentile * 100:g}"
    headers = ["run", "p50 (ms)", f"{name} (ms)", "CPU ms/query"]
    rows = [
        [str(number), f"{median / 1e6:.3f}", f"{headline / 1e6:.3f}", *cells]
        for number, (median, headline, cells) in enumerate(
            zip(summary.medians_ns, summary.headlines_ns, extra, strict=True), start=1
        )
    ]
    return Fitted(
        title=f"{summary.count} runs of `dlscope run {' '.join(arguments)}`, fresh processes",
        columns=[*(Column(h, "right") for h in headers), Column("verdict")],
        rows=rows,
        names=[f"run {row[0]}" for row in rows],
    )


def _spread_lines(summary: RepetitionSummary, max_spread: float) -> list[str]:
    """How far the runs spread, at the median and at the headline percentile, and whether
    either spread is past ``max_spread``: a tail that moves between runs is as much a reason
    not to trust one run as a median that does."""
    name = f"p{summary.percentile * 100:g}"
    spreads = {"p50": summary.median_cv, name: summary.headline_cv}
    lines = [
        f"p50 across runs: mean {summary.median_mean_ns / 1e6:.3f} ms, std "
        f"{summary.median_std_ns / 1e6:.3f} ms, coefficient of variation {summary.median_cv:.1%}"
        + ("" if name == "p50" else f"; {name}: {summary.headline_cv:.1%}")
    ]
    farthest = (
        f"run {summary.outlier_run} is the farthest from the others "
        f"({summary.outlier_deviation:+.1%} from their median p50)"
    )
    over = [f"{label} ({cv:.1%})" for label, cv in spreads.items() if cv > max_spread]
    if over:
        lines.append(
            f"high run-to-run variation: the spread is above {max_spread:.1%} (--max-spread) "
            f"at {' and '.join(over)}; {farthest}. One run's figures are not to be trusted "
            "alone on this machine."
        )
    else:
        both = " and ".join(spreads)
        lines.append(f"{both} within {max_spread:.1%} (--max-spread); {farthest}")
    return lines


def compare_command(
    baseline: Annotated[Path, typer.Argument(help="a result written by `dlscope run --json`")],
    candidate: Annotated[Path, typer.Argument(help="another one, to compare with the first")],
    allow_invalid: Annotated[
        bool,
        typer.Option(
            "--allow-invalid",
            help="compare even when a result is INVALID, its difference flagged as no evidence",
        ),
    ] = False,
) -> None:
    """Whether two results differ by more than their noise: the difference of their medians
    with a bootstrap interval, a Mann-Whitney test and the effect size. An INVALID result
    (its verdict's errors: interference, too few queries, ...) is refused, exit status 3:
    its latencies are not the system's, so no difference against it is evidence; with
    --allow-invalid the comparison is made and flagged as such."""
    documents = []
    for path in (baseline, candidate):
        try:
            documents.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise fail(f"{path}: cannot read a result: {exc}", 2) from exc
    invalid = [
        said
        for document, path, role in zip(
            documents, (baseline, candidate), ("baseline", "candidate"), strict=True
        )
        if (said := _invalid(document, f"the {role} {path}")) is not None
    ]
    if invalid and not allow_invalid:
        for said in invalid[:-1]:
            errors.print(f"[bold red]error:[/] {escape(said)}", soft_wrap=True, highlight=False)
        raise fail(
            f"{invalid[-1]}; a difference against an INVALID result is no evidence: rerun it "
            "on a quiet machine, or compare anyway with --allow-invalid",
            EXIT_INVALID,
        )
    base, _ = _latencies(documents[0], str(baseline))
    other, _ = _latencies(documents[1], str(candidate))
    result = compare(base, other)
    low, high = result.interval.low / 1e6, result.interval.high
    upper = "unbounded" if high is None else f"{high / 1e6:+.3f}"
    console.print(
        f"median {result.baseline_median_ns / 1e6:.3f} ms → {result.candidate_median_ns / 1e6:.3f}"
        f" ms: {result.difference_ns / 1e6:+.3f} ms ({result.relative_difference:+.1%}), "
        f"{result.interval.confidence:.0%} interval [{low:+.3f}, {upper}] ms"
    )
    p = "p < 0.0001" if result.p_value < 1e-4 else f"p = {result.p_value:.3g}"
    verdict = (
        f"significant ({p}, effect {result.magnitude}): the {result.faster} is faster"
        if result.significant
        else f"not significant ({p}): within the runs' noise"
    )
    if invalid:
        verdict = "[bold red]NOT EVIDENCE[/]: " + escape(f"{verdict}, but {'; '.join(invalid)}")
    console.print(verdict, soft_wrap=True, highlight=False)


def _invalid(document: dict[str, Any], which: str) -> str | None:
    """Why ``document``'s result is INVALID (its errors' codes), or None when it is VALID or
    judged by nothing dlscope knows (LoadGen's)."""
    verdict = (document.get("evaluation", {}).get("result") or {}).get("verdict")
    if not isinstance(verdict, dict) or verdict.get("status") != "INVALID":
        return None
    codes = sorted(
        {r.get("code", "?") for r in verdict.get("reasons", ()) if r.get("severity") == "error"}
    )
    return f"{which} is INVALID ({', '.join(codes)})"
