"""Experiments on the command line: ``--framework all`` (or a list) on ``run`` and ``submit``
evaluates one model on every matching framework and prints one comparison table."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import TypeAdapter, ValidationError
from rich.table import Table

from dlscope.gateway_client import gateway_client, submitted, until_settled
from dlscope.live import LiveEvaluations
from dlscope.machine_cli import cost_cells
from dlscope.terminal import console, errors, fail
from dlscope.zoo_cli import build_on_first_use
from shared.config import Settings
from shared.errors import DlscopeError
from shared.messages import (
    FRAMEWORKS,
    DeviceLease,
    ExperimentComparison,
    ExperimentRequested,
    FrameworkSelection,
    MemberResult,
    PairParity,
)

__all__ = [
    "ConcurrentOpt",
    "comparison_table",
    "experiment_request",
    "framework_selection",
    "measurement_order",
    "print_comparison",
    "run_experiment",
    "submit_experiment",
    "warn_concurrent_alone",
]

TERMINAL = ("compared", "failed")

ConcurrentOpt = Annotated[
    bool,
    typer.Option(
        "--concurrent",
        help="experiments: run the members together, without device leases (a contention "
        "study; each result is labelled measured under contention). By default members that "
        "share a device are measured one at a time",
    ),
]


def warn_concurrent_alone() -> None:
    """``--concurrent`` with one framework: accepted, and said to mean next to nothing."""
    errors.print(
        "[yellow]warning:[/] --concurrent runs an experiment's members together; with one "
        "framework there is nothing to run beside. The evaluation only skips the device "
        "lease, and its result is labelled as measured under contention.",
        soft_wrap=True,
        highlight=False,
    )


def framework_selection(value: str) -> FrameworkSelection | None:
    """``all`` or several comma-separated frameworks: an experiment; one framework: None."""
    if value == "all":
        return "all"
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown or not names:
        shown = ", ".join(repr(name) for name in unknown) or repr(value)
        raise fail(
            f"unknown framework {shown}; choose one of: {', '.join(FRAMEWORKS)}, "
            "several separated by commas, or all",
            2,
        )
    return TypeAdapter(FrameworkSelection).validate_python(names) if len(names) > 1 else None


def experiment_request(
    model: str,
    *,
    version: str,
    frameworks: FrameworkSelection,
    framework_version: str,
    hardware: str,
    scenario: dict[str, Any],
    dataset: str | None,
    split: str | None,
    atol: float,
    top1_agreement: float,
    requested_by: str,
    concurrent: bool = False,
) -> ExperimentRequested:
    try:
        return ExperimentRequested.model_validate(
            {
                "experiment_id": uuid.uuid4(),
                "models": [{"model": model, "version": version}],
                "frameworks": frameworks,
                "framework_version": framework_version,
                "hardware": hardware,
                "scenario": scenario,
                "dataset": dataset,
                "split": split,
                "tolerance": {"atol": atol, "min_top1_agreement": top1_agreement},
                "requested_by": requested_by,
                "concurrent": concurrent,
            }
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise fail(problems, 2) from exc


def _title(model: str, comparison: ExperimentComparison, hardware: str) -> str:
    frameworks = len({member.framework for member in comparison.evaluations})
    return f"{model} on {frameworks} framework{'s' * (frameworks != 1)} ({hardware})"


def comparison_table(title: str, comparison: ExperimentComparison) -> Table:
    """One row per member: its framework, latency statistics, what a query cost (CPU time,
    the framework process's peak memory), top-1, its verdict and parity with the reference
    member."""
    with_accuracy = any(m.accuracy for m in comparison.evaluations)
    table = Table(title=title)
    for column in ("framework", "version", "host"):
        table.add_column(column)
    for column in ("p50 ms", "p90 ms", "p99 ms", "samples/s", "CPU ms/query", "peak MiB"):
        table.add_column(column, justify="right")
    if with_accuracy:
        table.add_column("top-1", justify="right")
    table.add_column("verdict")
    table.add_column("parity vs reference")
    versus = {p.candidate: p for p in comparison.parity if p.reference == comparison.reference}
    for member in comparison.evaluations:
        table.add_row(*_row(member, with_accuracy, comparison.reference, versus))
    return table


def _row(
    member: MemberResult,
    with_accuracy: bool,
    reference: uuid.UUID | None,
    versus: dict[uuid.UUID, PairParity],
) -> list[str]:
    cells = [member.framework, member.framework_version, member.host]
    latency = member.latency
    if latency is None:
        cells += ["-"] * 4
    else:
        cells += [f"{latency.p50_ms:.3f}", f"{latency.p90_ms:.3f}", f"{latency.p99_ms:.3f}"]
        cells.append(f"{latency.throughput_per_s:.1f}")
    cells += cost_cells(member.cost)
    if with_accuracy:
        cells.append(f"{member.accuracy.top1:.4f}" if member.accuracy else "-")
    cells.append(_verdict(member))
    cells.append(_parity(member, reference, versus))
    return cells


def _verdict(member: MemberResult) -> str:
    verdict = member.verdict
    if verdict is None:
        return "-"
    if verdict.status == "VALID":
        return "[green]VALID[/]" + (" (warnings)" if verdict.reasons else "")
    return "[red]INVALID[/]: " + ", ".join(r.code for r in verdict.errors)


def _parity(
    member: MemberResult, reference: uuid.UUID | None, versus: dict[uuid.UUID, PairParity]
) -> str:
    if member.status != "completed":
        return f"[red]{member.status}[/]"
    if member.evaluation_id == reference:
        return "reference"
    parity = versus.get(member.evaluation_id)
    if parity is None or not parity.comparable:
        return "[yellow]not comparable[/]"
    mark = "[green]ok[/]" if parity.within_tolerance else "[red]out of tolerance[/]"
    agreement = "" if parity.top1_agreement is None else f", top-1 {parity.top1_agreement:.0%}"
    return f"{mark} max |diff| {parity.max_abs_error:.1e}{agreement}"


def print_comparison(
    title: str, comparison: ExperimentComparison, not_installed: dict[str, str] | None = None
) -> None:
    console.print(comparison_table(title, comparison))
    _print_costs_and_verdicts(comparison)
    tolerance = comparison.tolerance
    within = f"atol {tolerance.atol:g} x scale, top-1 agreement >= {tolerance.min_top1_agreement:g}"
    if comparison.parity_ok is True:
        console.print(f"parity: every pair within tolerance ({within})")
    elif comparison.parity_ok is False:
        for pair in comparison.parity:
            if not pair.within_tolerance:
                console.print(
                    f"parity: {pair.reference} vs {pair.candidate}: {pair.reason} ({within})",
                    soft_wrap=True,
                )
    if not comparison.complete:
        console.print("[yellow]the experiment's deadline passed before every member finished[/]")
    for gap in comparison.failures:
        subject = " ".join(str(part) for part in (gap.framework, gap.agent_id) if part)
        console.print(f"[red]failed[/] {subject or gap.model}: {gap.reason}", soft_wrap=True)
    for framework, reason in (not_installed or {}).items():
        console.print(f"not installed here: {framework} ({reason})", soft_wrap=True)


def _print_costs_and_verdicts(comparison: ExperimentComparison) -> None:
    """Why a member is INVALID, and what a starred peak memory means."""
    for member in comparison.evaluations:
        for reason in () if member.verdict is None else member.verdict.errors:
            console.print(f"[red]invalid[/] {member.framework}: {reason.message}", soft_wrap=True)
    if any(
        m.cost is not None and m.cost.peak_memory is not None and m.cost.peak_memory.scope != "job"
        for m in comparison.evaluations
    ):
        console.print("* peak memory since the framework process started (no per-job reset here)")


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


def _print_order(lines: list[str]) -> None:
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False)


def run_experiment(request: ExperimentRequested, json_path: Path | None) -> None:
    """``dlscope run --framework all``: the experiment in this process, then its table."""
    import uvloop

    from dlscope.embedded import embedded_settings, experiment

    settings = embedded_settings(Settings())
    model = request.models[0].model
    build_on_first_use(model, settings.home)
    with LiveEvaluations() as progress:
        try:
            outcome = uvloop.run(experiment(settings, request, watch=progress.observe))
        except DlscopeError as exc:
            raise fail(str(exc), 1) from exc
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(outcome.to_json(), indent=2))
    view = outcome.experiment
    comparison = view.compared()
    if comparison is None:
        raise fail(f"experiment {view.experiment_id} failed: {view.error}", 1)
    print_comparison(
        _title(model, comparison, request.hardware),
        comparison,
        outcome.not_installed,
    )
    _print_order(measurement_order(comparison.evaluations, outcome.windows))
    console.print(
        f"experiment {view.experiment_id}, trace {outcome.trace_id}; "
        f"events stored in {settings.resolved_database_url}"
    )
    if json_path is not None:
        console.print(f"full result written to {json_path}")
    _exit_on_disagreement(comparison)


def _exit_on_disagreement(comparison: ExperimentComparison) -> None:
    """Exit 1 when a member failed or two members' outputs disagree (printed above)."""
    if comparison.failures or comparison.parity_ok is False:
        raise typer.Exit(1)


def submit_experiment(gateway: str, token: str | None, body: dict[str, Any], wait: bool) -> None:
    """``dlscope submit --framework all``: the experiment on a deployment, then its table."""
    with gateway_client(gateway, token) as client:
        accepted = submitted(client, gateway, "/v1/experiments", body, "experiment")
        models = ", ".join(ref["model"] for ref in accepted["models"])
        console.print(
            f"experiment {accepted['id']} accepted ({models}); trace: {accepted['trace_url']}",
            soft_wrap=True,
        )
        if not wait:
            return
        with console.status("waiting for every member and the comparison…"):
            experiment = until_settled(client, f"/v1/experiments/{accepted['id']}", TERMINAL, 0.5)
        if experiment["status"] == "failed":
            raise fail(f"experiment failed: {experiment['error']}", 1)
        comparison = ExperimentComparison.model_validate(experiment["comparison"])
        windows = _windows(client, comparison.evaluations)
    print_comparison(_title(experiment["model"], comparison, experiment["hardware"]), comparison)
    _print_order(measurement_order(comparison.evaluations, windows))
    _exit_on_disagreement(comparison)


def _windows(client: httpx.Client, members: list[MemberResult]) -> dict[uuid.UUID, DeviceLease]:
    """Each measured member's device and window, from its evaluation.measured event."""
    windows = {}
    for member in members:
        if member.status != "completed":
            continue
        try:
            response = client.get(f"/v1/evaluations/{member.evaluation_id}/events")
        except httpx.HTTPError:  # the table is printed; the order is a footnote
            break
        if response.status_code != 200:
            continue
        measured = [e for e in response.json() if e["type"] == "evaluation.measured"]
        lease = measured[-1]["payload"].get("lease") if measured else None
        if lease is not None:
            windows[member.evaluation_id] = DeviceLease.model_validate(lease)
    return windows
