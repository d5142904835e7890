"""The tables a settled evaluation prints: its statistics with their confidence, what it
cost, its verdict, and the layers of one profiled query."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from dlscope.cli.machine import machine_rows

__all__ = ["generation_table", "layers_table", "summary_table"]


def summary_table(evaluation: dict[str, Any]) -> Table:
    result = evaluation["result"]
    scenario = result.get("scenario") or {}
    table = Table(
        title=f"{evaluation['model']} {evaluation['model_version']} on "
        f"{evaluation['framework']} ({evaluation['hardware']}), "
        f"{scenario.get('name', 'single-stream')} ({scenario.get('driver', 'native')} driver)"
    )
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key in ("count", "batch_size", "warmup_count"):
        table.add_row(key.replace("_", " "), str(result[key]))
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
            table.add_row(label, f"{result[key]:.3f}")
    table.add_row("throughput (samples/s)", f"{result['throughput_per_s']:.1f}")
    for phase in result.get("statistics") or []:
        _interval_rows(table, phase, several=len(result["statistics"]) > 1)
    if result.get("harness_overhead_ns") is not None:
        table.add_row("harness overhead (µs/query)", f"{result['harness_overhead_ns'] / 1e3:.2f}")
    for label, value in machine_rows(result.get("machine")):
        table.add_row(label, value)
    warmup = result.get("warmup")
    if warmup:
        table.add_row("warm-up ended by", str(warmup["decided_by"]))
    for label, value in _quality_rows(result):
        table.add_row(label, value)
    for label, value in _loadgen_rows(result):
        table.add_row(label, value)
    verdict = result.get("verdict")
    if verdict:
        table.add_row("verdict", verdict["status"])
        for reason in verdict["reasons"]:
            table.add_row(f"  {reason['severity']}: {reason['code']}", reason["message"])
    return table


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
        return f"≥ {value}"
    if interval:
        high = interval["high"]
        shown = "∞" if high is None else f"{high / 1e6:.2f}"
        return f"{value} [{interval['low'] / 1e6:.2f}, {shown}]"
    return value


def generation_table(generation: dict[str, Any]) -> Table:
    """A generative evaluation's token latencies; what each metric is, under the table."""
    definitions = generation["definitions"]
    shown = [k for k in ("ttft", "tpot", "itl", "e2e") if generation.get(k) is not None]
    caption = [f"{key.upper()}: {definitions[key]}" for key in shown]
    caption += [
        f"{label}: {definitions[key]}"
        for key, label in (("output_tokens_per_s", "tokens/s"), ("requests_per_s", "requests/s"))
    ]
    caption.append(
        "≥ x: a bound, not an estimate: too few values for that percentile (MLPerf's early "
        "stopping rule); [low, high]: 95% interval"
    )
    caption += _served_lines(generation)
    caption += _load_lines(generation)
    caption += [
        f"{key.upper()} intervals from {said}"
        for key in shown
        if (said := _effective(generation[key])) is not None
    ]
    table = Table(
        title=f"tokens: {generation['requests']} timed requests, "
        f"{generation['input_tokens_mean']:.1f} prompt and "
        f"{generation['output_tokens_mean']:.1f} output tokens on average",
        caption="\n".join(caption),
        caption_justify="left",
    )
    for column in ("metric", "p50 (ms)", "p90 (ms)", "p99 (ms)", "mean (ms)", "n"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key in shown:
        statistics = generation[key]
        table.add_row(
            key.upper(),
            *(_ms(statistics, p) for p in (0.5, 0.9, 0.99)),
            f"{statistics['mean_ns'] / 1e6:.2f}",
            str(statistics["count"]),
        )
    for key, unit in (("output_tokens_per_s", "output tokens/s"), ("requests_per_s", "requests/s")):
        table.add_row(unit, f"{generation[key]:.2f}", "", "", "", "")
    return table


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
        table.add_column(column, justify="right" if column in ("µs", "share") else "left")
    slowest = sorted(layers, key=lambda layer: layer["start_ns"] - layer["end_ns"])
    for layer in slowest[:shown]:
        took = layer["end_ns"] - layer["start_ns"]
        fused = f" (+{len(layer['fused'])} fused)" if layer["fused"] else ""
        table.add_row(
            layer["node"] + fused,
            layer["op_type"],
            " ".join(str(shape) for shape in layer["output_shapes"]),
            f"{took / 1e3:.1f}",
            f"{took / total:.1%}" if total else "",
        )
    if len(layers) > shown:
        table.add_row(f"… {len(layers) - shown} more (--json has them all)", "", "", "", "")
    return table


def _interval_rows(table: Table, phase: dict[str, Any], *, several: bool) -> None:
    """The headline percentile and the median with their confidence intervals; a percentile
    with too few queries behind it is shown as a bound (≥)."""
    prefix = f"batch {phase['samples_per_query']}: " if several else ""
    for figure in (phase["median"], phase["headline"]):
        name = f"p{figure['percentile'] * 100:g}"
        value = f"{figure['value_ns'] / 1e6:.3f}"
        if figure["kind"] == "bound":
            value = f"≥ {value} (bound: < {figure['min_queries']} queries)"
        elif figure.get("interval"):
            interval = figure["interval"]
            value += f" [{interval['low'] / 1e6:.3f}, {interval['high'] / 1e6:.3f}]"
        table.add_row(f"{prefix}{name} (ms) {_confidence(figure)}", value)
    throughput = phase["throughput"]
    interval = throughput["interval"]
    table.add_row(
        f"{prefix}samples/s {_confidence(throughput)}",
        f"{throughput['per_s']:.1f} [{interval['low']:.1f}, "
        + ("unbounded]" if interval["high"] is None else f"{interval['high']:.1f}]"),
    )
    if (effective := _effective(phase)) is not None:
        table.add_row(f"{prefix}intervals from", effective)


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
