"""``dlscope sweep``: a language model at several loads, one evaluation each, side by side:
concurrent streams, with ``--over rate`` Poisson arrival rates (the server scenario), or with
``--over batch`` batch sizes (the offline scenario, the prompts of a batch in one call a step);
with ``--search``, the goodput search for the highest number of streams or rate whose TTFT and
TPOT meet their bounds (``shared.measurement.goodput``).

Each load is an ordinary evaluation (stored, traced, with its own verdict), run one after
another on the same deployment: embedded, or a gateway's with ``--gateway``. A load whose run
was INVALID for anything but the bounds it is judged on (other processes on the CPUs, a late
client, failed or truncated requests: ``goodput.disturbance``) is disturbed: it is measured
once more, and if it is disturbed again the table says so and why, a search stops there with
its answer uncertain, and the exit status says it (``outcome``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from dlscope.cli.client import Client
from dlscope.cli.fitting import Column, Fitted
from dlscope.cli.gateway_options import Token, gateway_option
from dlscope.cli.options import EndpointOpt, EvaluationOptions, run_settings
from dlscope.cli.outcome import exit_status, worst
from dlscope.cli.served_options import OptionalModelArg, ServedOptions
from dlscope.cli.spread import spread_options
from dlscope.cli.target import client_for
from dlscope.cli.terminal import console, fail
from shared.measurement.goodput import (
    Outcome,
    Search,
    disturbance,
    goodput_search,
    judge_probe,
    rate_search,
)
from shared.measurement.pareto import pareto_frontier, per_user_tokens_per_s
from shared.measurement.statistics import BOUND_LEGEND, BOUND_MARK
from shared.messages import GenerationSummary, SweepPoint, Verdict

__all__ = ["sweep"]


Over = Literal["streams", "rate", "batch"]
_WHAT: dict[Over, str] = {
    "streams": "positive integers (streams)",
    "rate": "positive rates (req/s)",
    "batch": "positive integers (batch sizes)",
}


# Levels one sweep takes at most: each is an evaluation, run one after another (an
# experiment's models and a request's batch sizes are bounded alike).
MAX_LEVELS = 64


def _levels(text: str, over: Over) -> list[float]:
    kind = float if over == "rate" else int
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_LEVELS:
        raise fail(f"--levels takes at most {MAX_LEVELS} levels, not {len(parts)}", 2)
    try:
        levels = [kind(part) for part in parts]
    except ValueError:
        levels = []
    if not levels or any(not math.isfinite(level) or level <= 0 for level in levels):
        raise fail(f"--levels takes {_WHAT[over]} separated by commas, not {text!r}", 2)
    return levels


def _load(level: float, over: Over) -> str:
    if over == "streams":
        return f"{int(level)} concurrent stream(s)"
    if over == "batch":
        return f"batch size {int(level)}"
    return f"{level:g} requests/s"


@spread_options
def sweep(
    *,
    model: OptionalModelArg = None,
    options: EvaluationOptions,
    served: ServedOptions,
    levels: Annotated[
        str,
        typer.Option(
            help="the loads to run, separated by commas: concurrent streams, with --over "
            "rate requests per second, with --over batch batch sizes"
        ),
    ] = "1,2,4",
    over: Annotated[
        str,
        typer.Option(
            "--over",
            help="streams: concurrent closed-loop streams; rate: Poisson arrivals at a rate "
            "(the server scenario); batch: every prompt at once in batches of a size (the "
            "offline scenario)",
        ),
    ] = "streams",
    search: Annotated[
        bool,
        typer.Option(
            "--search",
            help="the goodput search: double the load from 1 while --ttft-bound and "
            "--tpot-bound are met, then bisect (--levels is then unused)",
        ),
    ] = False,
    max_concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            max=4096,
            help="--search: the most streams tried (a model in the worker's process: 256)",
        ),
    ] = 64,
    start_rate: Annotated[
        float, typer.Option(min=0.001, help="--search --over rate: the first rate (req/s)")
    ] = 1.0,
    max_rate: Annotated[
        float, typer.Option(min=0.001, help="--search --over rate: the highest rate tried")
    ] = 64.0,
    resolution: Annotated[
        float,
        typer.Option(
            min=0.01,
            max=1.0,
            help="--search --over rate: bisect until the rates that meet and miss are this "
            "fraction apart",
        ),
    ] = 0.1,
    gateway: Annotated[str | None, gateway_option("a deployment; default: embedded")] = None,
    token: Token = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write every load's result here")
    ] = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Run a language model at several loads and compare TTFT, TPOT, tokens/s and goodput;
    with --search, find the highest load that meets the TTFT, TPOT and E2E bounds given. A
    load INVALID beyond its bounds (disturbed) is measured once more, and said."""
    options, kind = _checked(options, over, search, start_rate)
    asked = [] if search else _levels(levels, kind)
    client = client_for(gateway, token, run_settings(endpoint))
    model, options = served.resolve(model, options, client)
    loads = _Loads(model, options, kind, client, search=search)
    percentile = options.slo_percentile or 0.99
    found = None
    if search:

        def probe(level: float) -> Outcome:
            summary, disturbed = loads.measure(level)
            judgement, reason = judge_probe(
                summary,
                ttft_bound_ms=options.ttft_bound,
                tpot_bound_ms=options.tpot_bound,
                e2e_bound_ms=options.e2e_bound,
                percentile=percentile,
            )
            return judgement, reason, disturbed

        if kind == "streams":
            found = goodput_search(probe, max_concurrency=max_concurrency)
        else:
            found = rate_search(probe, start=start_rate, max_rate=max_rate, resolution=resolution)
    else:
        for level in asked:
            if loads.measure(level)[1] is not None:
                console.print(
                    f"{_load(level, kind)} was disturbed: measuring it once more", markup=False
                )
                loads.measure(level)
    _show(model, options, loads, found, percentile, kind)
    console.print(_where(loads.sweep_id, gateway), soft_wrap=True, markup=False, highlight=False)
    if json_path is not None:
        _write(json_path, loads.results, found, loads.disturbed_first, loads.sweep_id)
    _close(client)
    status = loads.status(found)
    if status:
        raise typer.Exit(status)


@dataclasses.dataclass
class _Loads:
    """The loads measured, each one evaluation (the last where a load was measured twice),
    and why each load measured twice was disturbed the first time."""

    model: str
    options: EvaluationOptions
    kind: Over
    client: Client
    search: bool = False
    # Each load's request carries it: the sweep's page gathers them by it.
    sweep_id: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)
    results: dict[float, dict[str, Any]] = dataclasses.field(default_factory=dict)
    disturbed_first: dict[float, str] = dataclasses.field(default_factory=dict)

    def measure(self, level: float) -> tuple[GenerationSummary, str | None]:
        """The load's token statistics, and why its run was disturbed (None: it was not)."""
        kind, options, model = self.kind, self.options, self.model
        console.print(f"load: {_load(level, kind)}…")
        if kind == "streams":
            chosen = dataclasses.replace(options, concurrency=int(level))
        elif kind == "batch":
            chosen = dataclasses.replace(options, batch_size=int(level))
        else:
            chosen = dataclasses.replace(options, qps=level)
        request = chosen.request(model, requested_by="dlscope sweep")
        point = SweepPoint(sweep_id=self.sweep_id, over=kind, level=level, search=self.search)
        request = request.model_copy(update={"sweep": point})
        evaluated = self.client.evaluate(request, wait=True)
        assert evaluated is not None
        evaluation = evaluated.evaluation
        if evaluation["status"] != "completed":
            raise fail(f"the load of {_load(level, kind)} failed: {evaluation['error']}", 1)
        result = evaluation["result"]
        generation = result.get("generation")
        if generation is None:
            raise fail(f"{model} is not a language model: a sweep varies its generation load", 2)
        if level in self.results and (before := _disturbed(self.results[level])) is not None:
            self.disturbed_first[level] = before
        self.results[level] = evaluation
        return GenerationSummary.model_validate(generation), _disturbed(evaluation)

    def status(self, search: Search | None) -> int:
        """The sweep's exit status: its loads' worst (``outcome``); a search's, that of the
        probes left disturbed, since those that miss the bounds are its answer."""
        if search is None:
            return worst(exit_status(e["result"]) for e in self.results.values())
        return worst(exit_status(self.results[p.load]["result"]) for p in search.disturbed)


def _where(sweep_id: uuid.UUID, gateway: str | None) -> str:
    """Where the sweep's page is: the deployment's, or the one ``dlscope up`` serves from this
    home's store."""
    if gateway is not None:
        root = gateway.rstrip("/")
        return f"sweep {sweep_id}: its curves and Pareto chart at {root}/sweeps/{sweep_id}"
    return (
        f"sweep {sweep_id}: its curves and Pareto chart at http://127.0.0.1:8080/sweeps/{sweep_id} "
        "while dlscope up serves this home"
    )


def _disturbed(evaluation: dict[str, Any]) -> str | None:
    verdict = evaluation["result"].get("verdict")
    return disturbance(None if verdict is None else Verdict.model_validate(verdict))


def _checked(
    options: EvaluationOptions, over: str, search: bool, start_rate: float
) -> tuple[EvaluationOptions, Over]:
    """The options each load starts from, and what the loads are; a bad option is refused
    before the first load runs."""
    if options.selection() is not None:
        raise fail("a sweep runs one framework: give --framework one name", 2)
    if options.replay is not None:
        raise fail(
            "--replay runs one trace at its own times, not at a sweep's loads: replay it with "
            "dlscope run",
            2,
        )
    if search and all(
        b is None for b in (options.ttft_bound, options.tpot_bound, options.e2e_bound)
    ):
        raise fail(
            "--search needs a bound to meet: give --ttft-bound, --tpot-bound and/or --e2e-bound",
            2,
        )
    kind: Over
    if over == "streams":
        kind = "streams"
    elif over == "rate":
        kind = "rate"
        options = _in_scenario(options, "rate", "server", "rate")
        options = dataclasses.replace(options, qps=start_rate)
    elif over == "batch":
        kind = "batch"
        if search:
            raise fail(
                "--search finds the most streams or the highest rate meeting the bounds; an "
                "offline batch's TTFT counts from the phase's start, queue included, so "
                "--over batch runs the --levels given",
                2,
            )
        options = _in_scenario(options, "batch", "offline", "batch size")
    else:
        raise fail(f"--over takes streams, rate or batch, not {over!r}", 2)
    options.wire_scenario()
    return options, kind


def _in_scenario(
    options: EvaluationOptions, over: str, scenario: str, each: str
) -> EvaluationOptions:
    """``options`` in ``scenario``, which ``--over`` sets at each load: one the user named
    otherwise, or concurrent streams, are refused before the first load runs."""
    if options.concurrency not in (None, 1) or options.scenario not in ("single-stream", scenario):
        raise fail(
            f"--over {over} runs the {scenario} scenario at each {each}: leave out "
            "--concurrency and --scenario",
            2,
        )
    return dataclasses.replace(options, scenario=scenario)


def _close(client: Client) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        close()


def _ms(summary: GenerationSummary, metric: str, percentile: float) -> str:
    statistics = getattr(summary, metric)
    if statistics is None:
        return "-"
    found = statistics.percentile(percentile)
    value = f"{found.value_ns / 1e6:.1f}"
    if found.kind == "bound":
        return f"{BOUND_MARK} {value}"
    interval = found.interval
    if interval is None:
        return value
    high = "∞" if interval.high is None else f"{interval.high / 1e6:.1f}"
    return f"{value} [{interval.low / 1e6:.1f}, {high}]"


def _show(
    model: str,
    options: EvaluationOptions,
    loads: _Loads,
    found: Search | None,
    percentile: float,
    over: Over,
) -> None:
    label = f"p{percentile * 100:g}"
    kind = {
        "streams": "concurrent streams",
        "rate": "Poisson arrivals",
        "batch": "offline, prompts batched",
    }[over]
    columns = [{"streams": "streams", "rate": "offered req/s", "batch": "batch size"}[over]]
    columns += ["requests", "tokens/s", "tokens/s per user", "Pareto", "requests/s", "goodput/s"]
    columns += [f"{label} TTFT ms", f"{label} TPOT ms", "verdict", "disturbed"]
    if found is not None:
        columns.append("against the bounds")
    left = ("verdict", "against", "disturbed", "Pareto")
    judged = {p.load: p for p in found.probes} if found is not None else {}
    summaries = {
        level: GenerationSummary.model_validate(evaluation["result"]["generation"])
        for level, evaluation in loads.results.items()
    }
    per_user = {level: per_user_tokens_per_s(summary) for level, summary in summaries.items()}
    frontier = pareto_frontier(
        [(level, per_user[level], s.output_tokens_per_s) for level, s in summaries.items()]
    )
    rows = []
    for level, evaluation in sorted(loads.results.items()):
        result = evaluation["result"]
        summary = summaries[level]
        goodput = "-" if summary.goodput_per_s is None else f"{summary.goodput_per_s:.2f}"
        user = per_user[level]
        row = [
            f"{level:g}",
            str(summary.requests),
            f"{summary.output_tokens_per_s:.1f}",
            "-" if user is None else f"{user:.1f}",
            "frontier" if level in frontier else "-",
            f"{summary.requests_per_s:.2f}",
            goodput,
            _ms(summary, "ttft", percentile),
            _ms(summary, "tpot", percentile),
            (result.get("verdict") or {}).get("status", "-"),
            _disturbed_cell(_disturbed(evaluation), loads.disturbed_first.get(level)),
        ]
        if found is not None:
            probe = judged.get(level)
            row.append("-" if probe is None else f"{probe.judgement}: {probe.reason}")
        rows.append(row)
    bounded = any(cell.startswith(BOUND_MARK) for row in rows for cell in row[7:9])
    console.print(
        Fitted(
            title=f"{model} on {options.framework}: loads ({kind})",
            columns=[Column(c, "left" if c.startswith(left) else "right") for c in columns],
            rows=rows,
            names=[_load(level, over) for level in sorted(loads.results)],
            caption=_caption(bounded),
        )
    )
    for level, evaluation in sorted(loads.results.items()):
        if (why := _disturbed(evaluation)) is not None:
            console.print(
                f"{_load(level, over)}: disturbed twice, its figures are not the load's: {why}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    if found is not None:
        console.print(
            _conclusion(found, options, label, over), soft_wrap=True, highlight=False, markup=False
        )


def _caption(bounded: bool) -> str:
    """What the table's columns mean that their names cannot say."""
    said = (
        "tokens/s per user: 1000 / the mean TPOT; Pareto frontier: no other load has more "
        "tokens/s both per user and in all"
    )
    return f"{said}\n{BOUND_LEGEND}" if bounded else said


def _disturbed_cell(now: str | None, first: str | None) -> str:
    """What the disturbed column says of a load: disturbed twice, re-measured, or not."""
    if now is not None:
        return "twice: " + _codes(now)
    if first is not None:
        return "re-measured (first: " + _codes(first) + ")"
    return "-"


def _codes(disturbed: str) -> str:
    # "code: message; code: message" (``disturbance``); a message may hold "; " itself.
    return ", ".join(re.findall(r"(?:^|; )([a-z][a-z0-9_]*):", disturbed))


def _conclusion(found: Search, options: EvaluationOptions, label: str, over: Over) -> str:
    given = (("TTFT", options.ttft_bound), ("TPOT", options.tpot_bound), ("E2E", options.e2e_bound))
    bounds = " and ".join(
        f"{label} {name} ≤ {bound:g} ms" for name, bound in given if bound is not None
    )
    unit = "stream(s)" if over == "streams" else "requests/s"
    said = f"goodput search: the highest load meeting {bounds}"
    if found.exact and over == "streams":
        return f"{said} is {found.found:g} {unit}"
    if found.exact:
        assert found.below is not None
        assert found.resolution is not None
        return (
            f"{said} is {found.found:g} {unit}: {found.below:g} misses them (bisected to "
            f"within {found.resolution:.0%})"
        )
    where = (
        f"[{found.found:g}, {found.below:g})" if found.below is not None else f"≥ {found.found:g}"
    )
    said += f" lies in {where} {unit}"
    if found.disturbed:
        loads = ", ".join(f"{p.load:g}" for p in found.disturbed)
        said += (
            f"; uncertain: the probe at {loads} was INVALID beyond the bounds twice (disturbed: "
            "see above), so the search did not decide on it: rerun it on a quiet machine"
        )
    elif found.unresolved is not None:
        said += (
            f"; the probe at {found.unresolved:g} was indeterminate (its interval straddles a "
            "bound, or too few requests for that percentile): run longer (-n) to decide"
        )
    elif found.below is None:
        more = "--max-concurrency" if over == "streams" else "--max-rate"
        said += f" (every load tried met them; raise {more})"
    elif found.found == 0 and over == "rate":
        said += " (even the lowest rate tried missed them; lower --start-rate)"
    return said


def _write(
    path: Path,
    results: dict[float, dict[str, Any]],
    found: Search | None,
    disturbed_first: dict[float, str],
    sweep_id: uuid.UUID,
) -> None:
    document: dict[str, Any] = {
        "sweep_id": str(sweep_id),  # its page: /sweeps/<sweep_id>
        "loads": {f"{c:g}": e for c, e in sorted(results.items())},
        # Loads measured twice: why the first run was disturbed (the loads hold the second).
        "remeasured": {f"{c:g}": why for c, why in sorted(disturbed_first.items())},
    }
    if found is not None:
        document["search"] = {
            "found": found.found,
            "below": found.below,
            "unresolved": found.unresolved,
            "exact": found.exact,
            "uncertain": [p.load for p in found.disturbed],
            "resolution": found.resolution,
            "probes": [dataclasses.asdict(p) for p in found.probes],
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str))
