"""The tables a settled evaluation prints: its statistics with their confidence, what it
cost, its verdict, and the layers of one profiled query."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from dlscope.cli.fitting import Column, Fitted
from dlscope.cli.machine import machine_rows
from shared.measurement.statistics import BOUND_LEGEND, BOUND_MARK

__all__ = ["generation_table", "layers_table", "summary_table"]


def summary_table(evaluation: dict[str, Any]) -> Table:
    """One evaluation's figures, a row each; every percentile with fewer queries than it
    needs marked a bound, what that means said once under the table."""
    result = evaluation["result"]
    scenario = result.get("scenario") or {}
    rows: list[tuple[str, str]] = _count_rows(result)
    kinds = _kinds(result)
    for key in (
        "load_ms",
        "first_inference_ms",
        "mean_ms",
        "std_ms",
        "min_ms",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "max_ms",
    ):
        if result.get(key) is not None:
            label = key.removesuffix("_ms").replace("_", " ") + " (ms)"
            value = f"{result[key]:.3f}"
            rows.append((label, _marked(value, kinds.get(key))))
    rows.append(("throughput (samples/s)", f"{result['throughput_per_s']:.1f}"))
    for phase in result.get("statistics") or []:
        rows += _interval_rows(phase, several=len(result["statistics"]) > 1)
    if result.get("harness_overhead_ns") is not None:
        rows.append(("harness overhead (µs/query)", f"{result['harness_overhead_ns'] / 1e3:.2f}"))
    rows += machine_rows(result.get("machine"))
    warmup = result.get("warmup")
    if warmup:
        rows.append(("warm-up ended by", str(warmup["decided_by"])))
    rows += _quality_rows(result)
    rows += _loadgen_rows(result)
    verdict = result.get("verdict")
    if verdict:
        rows.append(("verdict", verdict["status"]))
        rows += [(f"  {r['severity']}: {r['code']}", r["message"]) for r in verdict["reasons"]]
    bounded = any(value.startswith(BOUND_MARK) for _, value in rows)
    table = Table(
        title=Text(
            f"{evaluation['model']} {evaluation['model_version']} on "
            f"{evaluation['framework']} ({evaluation['hardware']}), "
            f"{scenario.get('name', 'single-stream')} ({scenario.get('driver', 'native')} driver"
            f"{', a replayed trace' if scenario.get('replay') else ''})"
        ),
        caption=Text(BOUND_LEGEND) if bounded else None,
        caption_justify="left",
    )
    table.add_column("statistic")
    # A value too long for its line (a path) folds onto the next, never cut to "…".
    table.add_column("value", justify="right", overflow="fold")
    for label, value in rows:
        table.add_row(Text(label), Text(value))
    return table


def _count_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """How many queries were timed. LoadGen's offline run is one query of many samples, and
    its latencies are the samples': it says so, with how many."""
    rows = []
    loadgen = result.get("loadgen") or []
    scenario = (result.get("scenario") or {}).get("name")
    samples = loadgen[0]["summary"].get("samples_per_query") if loadgen else None
    if scenario == "offline" and samples is not None:
        rows.append(("queries", f"{result['count']} (offline: LoadGen issues one query)"))
        rows.append(("samples", f"{samples * result['count']} (the latencies below are theirs)"))
    else:
        rows.append(("count", str(result["count"])))
    rows += [(key.replace("_", " "), str(result[key])) for key in ("batch_size", "warmup_count")]
    return rows


def _kinds(result: dict[str, Any]) -> dict[str, str]:
    """Whether each flat percentile (``p90_ms``) is an estimate or a bound, as the headline
    phase's statistics judged it (LoadGen's figures come with none: LoadGen judges its own)."""
    statistics = result.get("statistics") or []
    if not statistics:
        return {}
    phase = statistics[0]
    found = [phase["median"], phase["headline"], *phase["percentiles"]]
    return {f"p{figure['percentile'] * 100:g}_ms": figure["kind"] for figure in found}


def _marked(value: str, kind: str | None) -> str:
    return f"{BOUND_MARK} {value}" if kind == "bound" else value


def _loadgen_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """LoadGen's result per phase and, where it timed tokens, its own TTFT and TPOT at the
    percentile it judges, its tokens per second, and why it found the run INVALID, in its
    words; then where its logs are."""
    rows = []
    for phase in result.get("loadgen") or []:
        summary = phase["summary"]
        rows.append((f"LoadGen result (batch {phase['samples_per_query']})", phase["result"]))
        label = f"p{summary.get('percentile', 0) * 100:g}"
        for key, name in (("ttft_percentile_ns", "TTFT"), ("tpot_percentile_ns", "TPOT")):
            if summary.get(key) is not None:
                rows.append((f"LoadGen {label} {name} (ms)", f"{summary[key] / 1e6:.3f}"))
        if summary.get("completed_tokens_per_second") is not None:
            rows.append(("LoadGen tokens/s", f"{summary['completed_tokens_per_second']:.2f}"))
        rows += [("LoadGen says", line) for line in summary.get("recommendations") or []]
        rows.append(("LoadGen logs", phase["output_dir"]))
    return rows


def _quality_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """What the outputs were worth: a classifier's accuracy, a language model's perplexity."""
    rows = []
    accuracy = result.get("accuracy")
    if accuracy:
        on = accuracy["dataset"] + (f" {accuracy['split']}" if accuracy["split"] else "")
        rows.append((f"top-1 on {on} ({accuracy['samples']} samples)", f"{accuracy['top1']:.4f}"))
        rows.append(("top-5", f"{accuracy['top5']:.4f}"))
    scored = result.get("perplexity")
    if scored:
        on = scored["dataset"] + (f" {scored['split']}" if scored["split"] else "")
        rows.append(
            (
                f"perplexity on {on} ({scored['tokens']} tokens, {scored['texts']} texts)",
                f"{scored['perplexity']:.3f}",
            )
        )
    return rows


def _ms(statistics: dict[str, Any], p: float) -> str:
    # The median and the headline carry a bootstrap interval; the other percentiles do not.
    candidates = [statistics["median"], statistics["headline"], *statistics["percentiles"]]
    found = next(x for x in candidates if x["percentile"] == p)
    value = f"{found['value_ns'] / 1e6:.2f}"
    interval = found.get("interval")
    if found["kind"] == "bound":
        return f"{BOUND_MARK} {value}"
    if interval:
        high = interval["high"]
        shown = "∞" if high is None else f"{high / 1e6:.2f}"
        return f"{value} [{interval['low'] / 1e6:.2f}, {shown}]"
    return value


def generation_table(generation: dict[str, Any]) -> Fitted:
    """A generative evaluation's token latencies, a row (or a block) per metric; what each
    metric is, under the table."""
    definitions = generation["definitions"]
    shown = [k for k in ("ttft", "tpot", "itl", "e2e") if generation.get(k) is not None]
    caption = [f"{key.upper()}: {definitions[key]}" for key in shown]
    # The rates are one figure each, not percentiles: under the table, with what they are.
    caption += [
        f"{label}: {generation[key]:.2f} ({definitions[key]})"
        for key, label in (
            ("output_tokens_per_s", "output tokens/s"),
            ("requests_per_s", "requests/s"),
        )
    ]
    caption.append(f"{BOUND_LEGEND}; [low, high]: 95% interval")
    caption += _served_lines(generation)
    caption += _load_lines(generation)
    caption += [
        f"{key.upper()} intervals from {said}"
        for key in shown
        if (said := _effective(generation[key])) is not None
    ]
    columns = [Column("metric")]
    columns += [
        Column(header, "right") for header in ("p50 (ms)", "p90 (ms)", "p99 (ms)", "mean (ms)", "n")
    ]
    rows = [
        [
            key.upper(),
            *(_ms(generation[key], p) for p in (0.5, 0.9, 0.99)),
            f"{generation[key]['mean_ns'] / 1e6:.2f}",
            str(generation[key]["count"]),
        ]
        for key in shown
    ]
    return Fitted(
        title=f"tokens: {generation['requests']} timed requests, "
        f"{generation['input_tokens_mean']:.1f} prompt and "
        f"{generation['output_tokens_mean']:.1f} output tokens on average",
        columns=columns,
        rows=rows,
        names=[row[0] for row in rows],
        caption="\n".join(caption),
    )


def _served_lines(generation: dict[str, Any]) -> list[str]:
    """What a served model's run adds: its failed requests by kind (never latencies), how far
    the tokenizer's counts are from the server's, the client's lag and its own CPU."""
    if generation.get("timed") != "chunk":
        return []
    failures = generation.get("failures") or {}
    failed = ", ".join(f"{n} {kind}" for kind, n in sorted(failures.items())) or "none"
    lines = [f"served: times are chunks'; failed requests (not latency samples): {failed}"]
    if (difference := generation.get("token_count_difference")) is not None:
        lines.append(f"output tokens, tokenizer vs the server's usage: {difference:+.1%}")
    if generation.get("client_lag") is None and (lag := generation.get("client_lag_p99_ms")):
        lines.append(f"client lag (issue - scheduled time), p99: {lag:.3f} ms")
    if (client := generation.get("client")) is not None:
        lines.append(
            f"client CPU: {client['cores']:.2f} of a core, {client['cpu_per_request_ms']:.3f} "
            "ms per request"
            + (" (saturated: the client, not the server, was the limit)" * client["saturated"])
        )
    return lines


def _load_lines(generation: dict[str, Any]) -> list[str]:
    """How the client kept the load: its own lag (open loop) or delay (closed loops), p50,
    p99 and max; and the steady-state window's figures beside the whole run's above."""
    lines = []
    if (sampled := generation.get("sampled_requests")) is not None:
        lines.append(
            f"token statistics of a uniform sample of {sampled} of the {generation['requests']} "
            "timed requests (too long a run to keep every token's time); counts, rates and "
            "goodput of all"
        )
    if (lag := generation.get("client_lag")) is not None:
        what = (
            "client lag (issue - scheduled time)"
            if lag["loop"] == "open"
            else "client delay (a stream's request done to its next issued)"
        )
        lines.append(
            f"{what}: p50 {lag['p50_ms']:.3f} ms, p99 {lag['p99_ms']:.3f} ms, max "
            f"{lag['max_ms']:.3f} ms over {lag['count']} requests"
        )
    if (steady := generation.get("steady")) is not None:
        span_s = (steady["end_ns"] - steady["start_ns"]) / 1e9
        ttft = steady.get("ttft")
        median = "" if ttft is None else f", TTFT p50 {ttft['median']['value_ns'] / 1e6:.2f} ms"
        lines.append(
            f"steady state ({steady['held']}): {span_s:.2f} s, {steady['share']:.0%} of the "
            f"timed phase, {steady['requests']} requests wholly inside: "
            f"{steady['output_tokens_per_s']:.2f} output tokens/s, "
            f"{steady['requests_per_s']:.2f} requests/s{median}"
            + (" (short: see the verdict)" if steady["short"] else "")
        )
    return lines


def layers_table(layers: list[dict[str, Any]], *, shown: int = 25) -> Table:
    """One query's layers as the first profiled pass timed them, slowest first."""
    total = sum(layer["end_ns"] - layer["start_ns"] for layer in layers)
    table = Table(title=f"per-layer time, one profiled query ({len(layers)} layers)")
    for column in ("layer", "op", "output shape", "µs", "share"):
        # A layer's name is the model's (``/features/0[1]/Conv``): folded, never cut to "…".
        table.add_column(
            column,
            justify="right" if column in ("µs", "share") else "left",
            overflow="fold",
        )
    slowest = sorted(layers, key=lambda layer: layer["start_ns"] - layer["end_ns"])
    for layer in slowest[:shown]:
        took = layer["end_ns"] - layer["start_ns"]
        fused = f" (+{len(layer['fused'])} fused)" if layer["fused"] else ""
        table.add_row(
            Text(layer["node"] + fused),
            Text(layer["op_type"]),
            Text(" ".join(str(shape) for shape in layer["output_shapes"])),
            f"{took / 1e3:.1f}",
            f"{took / total:.1%}" if total else "",
        )
    if len(layers) > shown:
        table.add_row(f"… {len(layers) - shown} more (--json has them all)", "", "", "", "")
    return table


def _interval_rows(phase: dict[str, Any], *, several: bool) -> list[tuple[str, str]]:
    """The headline percentile and the median with their confidence intervals; a percentile
    with too few queries behind it is marked a bound (``BOUND_MARK``)."""
    prefix = f"batch {phase['samples_per_query']}: " if several else ""
    rows = []
    for figure in (phase["median"], phase["headline"]):
        name = f"p{figure['percentile'] * 100:g}"
        value = f"{figure['value_ns'] / 1e6:.3f}"
        if figure["kind"] == "bound":
            value = f"{BOUND_MARK} {value} (fewer than {figure['min_queries']} queries)"
        elif figure.get("interval"):
            interval = figure["interval"]
            value += f" [{interval['low'] / 1e6:.3f}, {interval['high'] / 1e6:.3f}]"
        rows.append((f"{prefix}{name} (ms) {_confidence(figure)}", value))
    throughput = phase["throughput"]
    interval = throughput["interval"]
    rows.append(
        (
            f"{prefix}samples/s {_confidence(throughput)}",
            f"{throughput['per_s']:.1f} [{interval['low']:.1f}, "
            + ("unbounded]" if interval["high"] is None else f"{interval['high']:.1f}]"),
        )
    )
    if (effective := _effective(phase)) is not None:
        rows.append((f"{prefix}intervals from", effective))
    return rows


def _effective(statistics: dict[str, Any]) -> str | None:
    """Where successive values were correlated, how many independent ones the intervals
    claim (shared.measurement.statistics)."""
    effective = statistics.get("effective_count")
    if effective is None:
        return None
    return (
        f"{effective} effective of {statistics['count']} values (lag-1 autocorrelation "
        f"{statistics['autocorrelation']:.2f}: successive values are correlated)"
    )


def _confidence(figure: dict[str, Any]) -> str:
    interval = figure.get("interval")
    return f"({interval['confidence']:.0%} CI)" if interval else ""
