"""How an evaluation measures, as the command line asks it: the options of the ``Scenario``
(``shared.messages.scenario``), declared once for every command that requests one.

``EvaluationOptions`` (``dlscope.cli.options``) takes them among its fields, and
``wire_scenario`` turns them into the wire scenario: each option's name and help are the
user's, its field in the scenario may be named otherwise (``--qps`` is ``target_qps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from dlscope.cli.problems import SCENARIO_OPTIONS, problems
from dlscope.cli.terminal import fail
from shared.messages import SCENARIOS, Scenario, read_replay
from shared.messages.lengths import parse_lengths

__all__ = [
    "Adaptive",
    "BatchSize",
    "BatchSizes",
    "Concurrency",
    "DriverOpt",
    "E2eBound",
    "InputTokens",
    "Iterations",
    "LatencyBound",
    "MaxDuration",
    "MaxNewTokens",
    "MinDuration",
    "Natural",
    "OutputTokens",
    "Qps",
    "ReplayOpt",
    "SamplesPerQuery",
    "ScenarioOpt",
    "Seed",
    "SloPercentile",
    "Temperature",
    "TopK",
    "TpotBound",
    "TtftBound",
    "Warmup",
    "wire_scenario",
]


def _text_generation(flag: str, help_text: str) -> Any:
    """An option only a text-generation model reads: its help says so first, so a user of an
    image model knows to leave it out."""
    return typer.Option(flag, help=f"text generation: {help_text}")


ScenarioOpt = Annotated[
    str, typer.Option("--scenario", help=f"one of {', '.join(SCENARIOS)} (MLPerf semantics)")
]
DriverOpt = Annotated[
    str,
    typer.Option(
        "--driver", help="native, or loadgen: MLCommons LoadGen, which writes its mlperf logs"
    ),
]
Iterations = Annotated[
    int | None,
    typer.Option("--iterations", "-n", help="at least this many timed queries (offline: samples)"),
]
Warmup = Annotated[
    int | None,
    typer.Option(help="queries per warm-up window (warm-up runs until steady); 0: none"),
]
BatchSize = Annotated[
    int, typer.Option("--batch-size", "-b", help="samples per query (offline: per batch)")
]
SamplesPerQuery = Annotated[int | None, typer.Option(help="multi-stream: samples per query")]
Qps = Annotated[float | None, typer.Option("--qps", help="server: target queries per second")]
LatencyBound = Annotated[
    float | None, typer.Option("--latency-bound", help="server: p99 latency bound (ms)")
]
BatchSizes = Annotated[
    str | None, typer.Option("--batch-sizes", help="batch-sweep: sizes, e.g. 1,2,4,8")
]
MinDuration = Annotated[
    float | None, typer.Option("--min-duration", help="the timed phase lasts at least (s)")
]
MaxDuration = Annotated[
    float | None, typer.Option("--max-duration", help="the timed phase stops here (s)")
]
Seed = Annotated[int, typer.Option(help="seed of the inputs, the sample order, the arrivals")]
Adaptive = Annotated[
    float | None,
    typer.Option(
        "--adaptive",
        help="keep measuring until the headline's 95%% interval is within this fraction "
        "(e.g. 0.01), or --max-duration",
    ),
]
MaxNewTokens = Annotated[
    int | None, _text_generation("--max-new-tokens", "tokens per request (default 32)")
]
InputTokens = Annotated[
    str | None,
    _text_generation(
        "--input-tokens",
        "synthetic prompts of lengths drawn from N, uniform:MIN-MAX or normal:MEAN,STDDEV"
        "[,MIN-MAX] (the tokenizer's tokens, seeded by --seed)",
    ),
]
OutputTokens = Annotated[
    str | None,
    _text_generation(
        "--output-tokens",
        "each prompt's output length drawn from N, uniform:MIN-MAX or "
        "normal:MEAN,STDDEV[,MIN-MAX] (instead of --max-new-tokens)",
    ),
]
ReplayOpt = Annotated[
    Path | None,
    _text_generation(
        "--replay",
        "with --scenario server against a served model: replay this trace, a JSON object a "
        "line with timestamp (ms), input_length and output_length (the Mooncake format), "
        "instead of Poisson arrivals and drawn lengths",
    ),
]
Natural = Annotated[
    bool,
    _text_generation(
        "--natural",
        "stop a request at its end-of-sequence token; by default every request generates "
        "exactly --max-new-tokens",
    ),
]
TtftBound = Annotated[
    float | None, _text_generation("--ttft-bound", "p99 time-to-first-token bound (ms)")
]
TpotBound = Annotated[
    float | None, _text_generation("--tpot-bound", "p99 time-per-output-token bound (ms)")
]
E2eBound = Annotated[
    float | None,
    _text_generation("--e2e-bound", "p99 end-to-end bound, scheduled time to last token (ms)"),
]
SloPercentile = Annotated[
    float | None,
    _text_generation(
        "--slo-percentile", "the percentile the TTFT/TPOT bounds judge (default 0.99)"
    ),
]
Concurrency = Annotated[
    int | None,
    _text_generation("--concurrency", "streams issuing requests back to back at once (default 1)"),
]
Temperature = Annotated[
    float | None,
    _text_generation("--temperature", "sample at this temperature (default 0: greedy)"),
]
TopK = Annotated[
    int | None, typer.Option("--top-k", help="text generation, sampling: the k best tokens only")
]


def wire_scenario(options: Mapping[str, Any]) -> dict[str, Any]:
    """The wire scenario's fields from ``options``, the options' values by their fields'
    names in ``EvaluationOptions``, checked now: a bad one is refused naming the option the
    user typed. Options left out (None) keep the scenario's defaults."""
    given: dict[str, Any] = {
        "name": options["scenario"],
        "driver": options["driver"],
        "iterations": options["iterations"],
        "warmup": options["warmup"],
        "batch_size": options["batch_size"],
        "samples_per_query": options["samples_per_query"],
        "target_qps": options["qps"],
        "latency_bound_ms": options["latency_bound"],
        "min_duration_s": options["min_duration"],
        "max_duration_s": options["max_duration"],
        "adaptive_half_width": options["adaptive"],
        "seed": options["seed"],
        "max_new_tokens": options["max_new_tokens"],
        "ignore_eos": False if options["natural"] else None,
        "ttft_bound_ms": options["ttft_bound"],
        "tpot_bound_ms": options["tpot_bound"],
        "e2e_bound_ms": options["e2e_bound"],
        "slo_percentile": options["slo_percentile"],
        "concurrency": options["concurrency"],
        "temperature": options["temperature"],
        "top_k": options["top_k"],
    }
    for option, field in (("input_tokens", "--input-tokens"), ("output_tokens", "--output-tokens")):
        text = options[option]
        if text is not None:
            try:
                given[option] = parse_lengths(text).model_dump(mode="json")
            except ValueError as exc:
                raise fail(f"{field} {exc}", 2) from None
    if options.get("replay") is not None:
        given["replay"] = _replay(options["replay"])
    batch_sizes = options["batch_sizes"]
    if batch_sizes is not None:
        try:
            given["batch_sizes"] = [int(size) for size in batch_sizes.split(",")]
        except ValueError as exc:
            raise fail(
                f"--batch-sizes takes integers separated by commas, not {batch_sizes!r}", 2
            ) from exc
    fields = {key: value for key, value in given.items() if value is not None}
    try:
        return Scenario.model_validate(fields).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:
        raise fail(problems(exc, SCENARIO_OPTIONS, scenario=options["scenario"]), 2) from exc


def _replay(path: Path) -> dict[str, Any]:
    """The trace at ``path`` as the scenario's replay, refused naming the line at fault."""
    try:
        with path.open(encoding="utf-8") as lines:
            replay = read_replay(lines, name=path.name)
    except OSError as exc:
        raise fail(f"--replay {path}: cannot read it ({exc.strerror or exc})", 2) from None
    except UnicodeDecodeError:
        raise fail(f"--replay {path}: not UTF-8 text (a JSON object a line)", 2) from None
    except ValueError as exc:
        raise fail(f"--replay {path}: {exc}", 2) from None
    return replay.model_dump(mode="json")
