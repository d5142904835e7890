"""Experiments on the command line: ``--framework all`` (or a list) on ``run`` and ``submit``
evaluates one model on every matching framework and prints one comparison table."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import typer
from rich.text import Text

from dlscope.cli.client import Compared
from dlscope.cli.fitting import Cell, Column, Fitted, styled, text
from dlscope.cli.layers import show_member_layers
from dlscope.cli.machine import cost_cells
from dlscope.cli.outcome import EXIT_FAILED, exit_status, worst
from dlscope.cli.terminal import console, fail
from shared.measurement.statistics import (
    BOUND_LEGEND,
    BOUND_MARK,
    min_queries_for_percentile,
)
from shared.messages import DeviceLease, ExperimentComparison, MemberResult, PairParity

__all__ = ["comparison_table", "measurement_order", "print_comparison", "show_comparison"]


def _title(model: str, comparison: ExperimentComparison, hardware: str) -> str:
    frameworks = len({member.framework for member in comparison.evaluations})
    return f"{model} on {frameworks} framework{'s' * (frameworks != 1)} ({hardware})"


def comparison_table(title: str, comparison: ExperimentComparison) -> Fitted:
    """One row per member (one block where the terminal is narrow): its framework, latency
    statistics, what a query cost (CPU time, the framework process's peak memory), top-1,
    its verdict and parity with the reference member. A percentile with fewer queries than
    it needs is marked a bound, said once in the caption."""
    with_accuracy = any(m.accuracy for m in comparison.evaluations)
    with_tokens = any(m.tokens for m in comparison.evaluations)
    columns = [Column("framework"), Column("version"), Column("host")]
    numbers = ["p50 ms", "p90 ms", "p99 ms", "samples/s", "CPU ms/query", "peak MiB"]
    if with_tokens:
        numbers += ["TTFT p50 ms", "TPOT p50 ms", "ITL p99 ms", "tokens/s"]
    if with_accuracy:
        numbers.append("top-1")
    columns += [Column(header, "right") for header in numbers]
    columns += [Column("verdict"), Column("parity vs reference")]
    versus = {p.candidate: p for p in comparison.parity if p.reference == comparison.reference}
    # Two workers of one framework on one host (two servers behind endpoint workers) are
    # told apart by their agent ids.
    systems = Counter((m.framework, m.host) for m in comparison.evaluations)
    rows, names = [], []
    for member in comparison.evaluations:
        row = _row(member, with_accuracy, with_tokens, comparison.reference, versus)
        if systems[(member.framework, member.host)] > 1:
            row[2] = f"{member.host} ({member.agent_id})"
        rows.append(row)
        names.append(f"{member.framework} {member.framework_version} on {row[2]}")
    bounded = any(str(cell).startswith(BOUND_MARK) for row in rows for cell in row[3:6])
    return Fitted(title, columns, rows, names, named=3, caption=BOUND_LEGEND if bounded else None)


def _row(
    member: MemberResult,
    with_accuracy: bool,
    with_tokens: bool,
    reference: uuid.UUID | None,
    versus: dict[uuid.UUID, PairParity],
) -> list[Cell]:
    cells: list[Cell] = [member.framework, member.framework_version, member.host]
    latency = member.latency
    if latency is None:
        cells += ["-"] * 4
    else:
        cells += [
            _percentile(value, p, latency.count, judged=member.verdict is not None)
            for value, p in ((latency.p50_ms, 0.5), (latency.p90_ms, 0.9), (latency.p99_ms, 0.99))
        ]
        cells.append(f"{latency.throughput_per_s:.1f}")
    cells += cost_cells(member.cost)
    if with_tokens:
        cells += _token_cells(member)
    if with_accuracy:
        cells.append(f"{member.accuracy.top1:.4f}" if member.accuracy else "-")
    cells.append(_verdict(member))
    cells.append(_parity(member, reference, versus))
    return cells


def _percentile(value_ms: float, p: float, queries: int, *, judged: bool) -> str:
    """A member's percentile, marked a bound where it had fewer queries than MLPerf's
    early-stopping minimum for it: the rule that makes a result's own percentile a "bound"
    (``summarize_latencies``). LoadGen's driver (no verdict of dlscope's) judges its own."""
    shown = f"{value_ms:.3f}"
    if judged and queries < min_queries_for_percentile(p):
        return f"{BOUND_MARK} {shown}"
    return shown


def _token_cells(member: MemberResult) -> list[Cell]:
    tokens = member.tokens
    if tokens is None:
        return ["-"] * 4
    return [
        f"{tokens.ttft_p50_ms:.1f}",
        "-" if tokens.tpot_p50_ms is None else f"{tokens.tpot_p50_ms:.2f}",
        "-" if tokens.itl_p99_ms is None else f"{tokens.itl_p99_ms:.2f}",
        f"{tokens.output_tokens_per_s:.1f}",
    ]


def _verdict(member: MemberResult) -> Cell:
    verdict = member.verdict
    if verdict is None:
        return "-"
    if verdict.status == "VALID":
        return styled("VALID", "green", " (warnings)" if verdict.reasons else "")
    return styled("INVALID", "red", ": " + ", ".join(r.code for r in verdict.errors))


def _parity(
    member: MemberResult, reference: uuid.UUID | None, versus: dict[uuid.UUID, PairParity]
) -> Cell:
    if member.status != "completed":
        return styled(member.status, "red")
    if member.evaluation_id == reference:
        return "reference"
    parity = versus.get(member.evaluation_id)
    if parity is None or not parity.comparable:
        return styled("not comparable", "yellow")
    mark = styled("ok", "green") if parity.within_tolerance else styled("out of tolerance", "red")
    if parity.tokens_compared is not None:  # greedy tokens: how many agree, never arithmetic
        return mark + f" {parity.tokens_agreeing} of {parity.tokens_compared} greedy tokens agree"
    agreement = "" if parity.top1_agreement is None else f", top-1 {parity.top1_agreement:.0%}"
    cosine = "" if parity.min_cosine is None else f", cosine >= {parity.min_cosine:.7f}"
    return mark + f" max |diff| {parity.max_abs_error or 0.0:.1e}{agreement}{cosine}"


def print_comparison(
    title: str, comparison: ExperimentComparison, not_installed: dict[str, str] | None = None
) -> None:
    console.print(comparison_table(title, comparison))
    _print_costs_and_verdicts(comparison)
    tolerance = comparison.tolerance
    within = f"atol {tolerance.atol:g} x scale, top-1 agreement >= {tolerance.min_top1_agreement:g}"
    if comparison.parity_ok is True:
        _say(f"parity: every pair within tolerance ({within})")
    elif comparison.parity_ok is False:
        for pair in comparison.parity:
            if not pair.within_tolerance:
                reference = pair.reference_name or pair.reference
                candidate = pair.candidate_name or pair.candidate
                # Greedy tokens' reason says what they are held to; no atol applies.
                held = "" if pair.tokens_compared is not None else f" ({within})"
                _say(f"parity: {reference} vs {candidate}: {pair.reason}{held}")
    if not comparison.complete:
        _say(styled("the experiment's deadline passed before every member finished", "yellow"))
    for gap in comparison.failures:
        subject = " ".join(str(part) for part in (gap.framework, gap.agent_id) if part)
        _say(styled("failed", "red", f" {subject or gap.model}: {gap.reason}"))
    for framework, reason in (not_installed or {}).items():
        _say(f"cannot run here: {framework} ({reason})")


def _print_costs_and_verdicts(comparison: ExperimentComparison) -> None:
    """Why a member is INVALID, and what a starred peak memory means."""
    for member in comparison.evaluations:
        for reason in () if member.verdict is None else member.verdict.errors:
            _say(styled("invalid", "red", f" {member.framework}: {reason.message}"))
    if any(
        m.cost is not None and m.cost.peak_memory is not None and m.cost.peak_memory.scope != "job"
        for m in comparison.evaluations
    ):
        _say("* peak memory since the framework process started (no per-job reset here)")


def measurement_order(
    members: list[MemberResult], windows: dict[uuid.UUID, DeviceLease]
) -> list[str]:
    """How the members shared each device they measured (one line per host and device):
    one at a time, in the order their workers got the device; or together (concurrent)."""
    shared: dict[tuple[str, str], list[tuple[DeviceLease, MemberResult]]] = {}
    for member in members:
        if (window := windows.get(member.evaluation_id)) is not None:
            shared.setdefault((window.host, window.device), []).append((window, member))
    lines = []
    for (host, device), measured in shared.items():
        if len(measured) < 2:
            continue
        if not all(window.held for window, _ in measured):
            lines.append(
                f"{host} {device}: members measured together (concurrent), without the "
                "device's lease: each result is labelled measured under contention"
            )
            continue
        measured.sort(key=lambda pair: pair[0].acquired_at)
        order = ", ".join(
            member.framework + (f" (waited {w.waited_s:.1f} s)" if w.waited_s >= 0.05 else "")
            for w, member in measured
        )
        lines.append(
            f"{host} {device}: members measured one at a time, in the order their workers "
            f"got the device: {order}"
        )
    return lines


def _say(line: str | Text) -> None:
    """One line of what the experiment found, as written (never read as markup), unwrapped
    so that it can be grepped."""
    console.print(text(line), soft_wrap=True, highlight=False)


def _print_order(lines: list[str]) -> None:
    for line in lines:
        _say(line)


def show_comparison(compared: Compared, json_path: Path | None) -> None:
    """The comparison table, how the members shared their devices, where it is stored; exit 1
    when a member failed or two members' outputs disagree, else 3 or 4 when a member's result
    is INVALID (``outcome``)."""
    comparison = compared.comparison
    if comparison is None:
        raise fail(f"experiment {compared.experiment_id} failed: {compared.error}", 1)
    title = _title(compared.model, comparison, compared.hardware)
    print_comparison(title, comparison, compared.not_installed)
    _print_order(measurement_order(comparison.evaluations, compared.windows))
    show_member_layers(compared.layers)  # with --trace-level framework or deeper
    if compared.footer is not None:
        console.print(text(compared.footer))
    if json_path is not None:
        console.print(text(f"full result written to {json_path}"))
    if comparison.failures or comparison.parity_ok is False:
        raise typer.Exit(EXIT_FAILED)
    status = worst(
        exit_status({"verdict": member.verdict.model_dump(mode="json")})
        for member in comparison.evaluations
        if member.verdict is not None
    )
    if status:
        raise typer.Exit(status)
