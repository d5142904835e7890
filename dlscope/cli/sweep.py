"""``dlscope sweep``: a language model at several loads (concurrent streams), one evaluation
each, side by side; with ``--search``, the goodput search for the highest load whose TTFT and
TPOT meet their bounds (``shared.measurement.goodput``).

Each load is an ordinary evaluation (stored, traced, with its own verdict), run one after
another on the same deployment: embedded, or a gateway's with ``--gateway``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dlscope.cli.client import Client, client_for
from dlscope.cli.options import EndpointOpt, EvaluationOptions, ModelArg, use_endpoint
from dlscope.cli.spread import spread_options
from dlscope.cli.terminal import console, fail
from shared.measurement.goodput import Search, goodput_search, judge_probe
from shared.messages import GenerationSummary

__all__ = ["sweep"]


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or any(level < 1 for level in levels):
        raise fail(f"--levels takes positive integers separated by commas, not {text!r}", 2)
    return levels


@spread_options
def sweep(
    model: ModelArg,
    options: EvaluationOptions,
    levels: Annotated[
        str, typer.Option(help="the loads to run: concurrent streams, separated by commas")
    ] = "1,2,4",
    search: Annotated[
        bool,
        typer.Option(
            "--search",
            help="the goodput search: double the load from 1 while --ttft-bound and "
            "--tpot-bound are met, then bisect (--levels is then unused)",
        ),
    ] = False,
    max_concurrency: Annotated[
        int, typer.Option(min=1, max=256, help="--search: the largest load tried")
    ] = 64,
    gateway: Annotated[
        str | None,
        typer.Option(envvar="DLSCOPE_GATEWAY_URL", help="a deployment; default: embedded"),
    ] = None,
    token: Annotated[str | None, typer.Option(envvar="DLSCOPE_API_TOKEN")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write every load's result here")
    ] = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Run a language model at several loads and compare TTFT, TPOT, tokens/s and goodput;
    with --search, find the highest load that meets the TTFT and TPOT bounds."""
    if options.selection() is not None:
        raise fail("a sweep runs one framework: give --framework one name", 2)
    if search and options.ttft_bound is None and options.tpot_bound is None:
        raise fail("--search needs a bound to meet: give --ttft-bound and/or --tpot-bound", 2)
    options.wire_scenario()  # a bad option is refused before the first load runs
    use_endpoint(endpoint)
    client = client_for(gateway, token)
    results: dict[int, dict[str, Any]] = {}

    def measure(concurrency: int) -> GenerationSummary:
        console.print(f"load: {concurrency} concurrent stream(s)…")
        chosen = dataclasses.replace(options, concurrency=concurrency)
        evaluated = client.evaluate(chosen.request(model, requested_by="dlscope sweep"), wait=True)
        assert evaluated is not None
        evaluation = evaluated.evaluation
        if evaluation["status"] != "completed":
            raise fail(f"the load of {concurrency} failed: {evaluation['error']}", 1)
        generation = evaluation["result"].get("generation")
        if generation is None:
            raise fail(f"{model} is not a language model: a sweep varies generation streams", 2)
        results[concurrency] = evaluation
        return GenerationSummary.model_validate(generation)

    percentile = options.slo_percentile or 0.99
    found = None
    if search:

        def probe(concurrency: int) -> Any:
            return judge_probe(
                measure(concurrency),
                ttft_bound_ms=options.ttft_bound,
                tpot_bound_ms=options.tpot_bound,
                percentile=percentile,
            )

        found = goodput_search(probe, max_concurrency=max_concurrency)
    else:
        for level in _levels(levels):
            measure(level)
    _show(model, options, results, found, percentile)
    if json_path is not None:
        _write(json_path, results, found)
    _close(client)


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
        return f"≥ {value}"
    interval = found.interval
    if interval is None:
        return value
    high = "∞" if interval.high is None else f"{interval.high / 1e6:.1f}"
    return f"{value} [{interval.low / 1e6:.1f}, {high}]"


def _show(
    model: str,
    options: EvaluationOptions,
    results: dict[int, dict[str, Any]],
    found: Search | None,
    percentile: float,
) -> None:
    label = f"p{percentile * 100:g}"
    table = Table(title=f"{model} on {options.framework}: loads (concurrent streams)")
    columns = ["streams", "requests", "tokens/s", "requests/s", "goodput/s"]
    columns += [f"{label} TTFT ms", f"{label} TPOT ms", "verdict"]
    if found is not None:
        columns.append("against the bounds")
    for column in columns:
        table.add_column(
            column, justify="left" if column.startswith(("verdict", "against")) else "right"
        )
    judged = {p.concurrency: p for p in found.probes} if found is not None else {}
    for concurrency, evaluation in sorted(results.items()):
        result = evaluation["result"]
        summary = GenerationSummary.model_validate(result["generation"])
        goodput = "-" if summary.goodput_per_s is None else f"{summary.goodput_per_s:.2f}"
        row = [
            str(concurrency),
            str(summary.requests),
            f"{summary.output_tokens_per_s:.1f}",
            f"{summary.requests_per_s:.2f}",
            goodput,
            _ms(summary, "ttft", percentile),
            _ms(summary, "tpot", percentile),
            (result.get("verdict") or {}).get("status", "-"),
        ]
        if found is not None:
            probe = judged.get(concurrency)
            row.append("-" if probe is None else f"{probe.judgement}: {probe.reason}")
        table.add_row(*row)
    console.print(table)
    if found is not None:
        console.print(_conclusion(found, options, label), soft_wrap=True, highlight=False)


def _conclusion(found: Search, options: EvaluationOptions, label: str) -> str:
    bounds = " and ".join(
        f"{label} {name} ≤ {bound:g} ms"
        for name, bound in (("TTFT", options.ttft_bound), ("TPOT", options.tpot_bound))
        if bound is not None
    )
    if found.exact:
        return f"goodput search: the highest load meeting {bounds} is {found.found} stream(s)"
    where = f"[{found.found}, {found.below})" if found.below is not None else f"≥ {found.found}"
    said = f"goodput search: the highest load meeting {bounds} lies in {where}"
    if found.unresolved is not None:
        said += (
            f"; the probe at {found.unresolved} was indeterminate (its interval straddles a "
            "bound, or too few requests for that percentile): run longer (-n) to decide"
        )
    elif found.below is None:
        said += " (every load tried met them; raise --max-concurrency)"
    return said


def _write(path: Path, results: dict[int, dict[str, Any]], found: Search | None) -> None:
    document: dict[str, Any] = {"loads": {str(c): e for c, e in sorted(results.items())}}
    if found is not None:
        document["search"] = {
            "found": found.found,
            "below": found.below,
            "unresolved": found.unresolved,
            "exact": found.exact,
            "probes": [dataclasses.asdict(p) for p in found.probes],
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str))
