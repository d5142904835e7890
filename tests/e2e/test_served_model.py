"""A served model no manifest names, as a user benchmarks one: ``dlscope run --served-model
NAME --tokenizer FILE --endpoint URL``. Against the ground-truth stub (``harness.openai_stub``,
which serves a model named ``stub``): the run completes with every token counted by the
tokenizer given, the requests ask the server for its own name, the manifest dlscope wrote is
registered so the run repeats by that name, and a sweep takes the same options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlscope.cli.outcome import COMPLETED
from harness.openai_stub import MODEL, StubTiming, openai_stub, stub_stats
from harness.stub_tokenizer import write_stub_tokenizer
from shared.measurement.workload import WORKLOAD_ROWS, draw_lengths
from shared.messages.lengths import parse_lengths
from tests.e2e.test_cli import dlscope

pytestmark = pytest.mark.e2e

TOKENS = 8
RUN = ("-n", "6", "--min-duration", "0", "--max-new-tokens", str(TOKENS))


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    with openai_stub(StubTiming(ttft_ms=20, itl_ms=2)) as (url, _):
        yield url


def test_a_served_model_is_benchmarked_by_its_servers_name_and_repeats_by_its_own(
    stub: str, tmp_path: Path
) -> None:
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    asked = ("--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", stub)
    stub_stats(stub, reset=True)
    first = dlscope(tmp_path, "run", *asked, *RUN, "--json", str(tmp_path / "first.json"))
    assert first.returncode in COMPLETED, first.stdout + first.stderr
    assert "served-stub 1.0.0 on endpoint" in " ".join(first.stdout.split())
    document = json.loads((tmp_path / "first.json").read_text())
    evaluation = document["evaluation"]
    assert (evaluation["model"], evaluation["framework"]) == ("served-stub", "endpoint")
    generation = evaluation["result"]["generation"]
    # Every answer read to its end and counted by the tokenizer given: the stub's usage agrees.
    assert generation["failures"] == {}
    assert generation["output_tokens_mean"] == TOKENS
    assert generation["token_count_difference"] == 0
    assert generation["client"]["cpu_per_request_ms"] > 0
    measured = document["events"][3]["payload"]
    assert measured["generation"]["served"]["model"] == MODEL  # asked by the server's name
    # The warm-up, the parity requests and the timed ones all reached the stub.
    assert stub_stats(stub)["completed"] >= generation["requests"]

    # The manifest it wrote is registered: the same run by its name, with no --served-model.
    again = dlscope(
        tmp_path, "run", "served-stub", "--framework", "endpoint", "--endpoint", stub, *RUN
    )
    assert again.returncode in COMPLETED, again.stdout + again.stderr
    listed = dlscope(tmp_path, "models", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("served-stub") == 1  # registered once, unchanged the second time


def test_a_sweep_of_a_served_model_takes_the_same_options(stub: str, tmp_path: Path) -> None:
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    swept = dlscope(
        tmp_path,
        *("sweep", "--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", stub),
        *("--levels", "1,4", "-n", "8", "--min-duration", "0", "--max-new-tokens", str(TOKENS)),
        "--json",
        str(tmp_path / "sweep.json"),
    )
    assert swept.returncode in COMPLETED, swept.stdout + swept.stderr
    loads = json.loads((tmp_path / "sweep.json").read_text())["loads"]
    assert sorted(loads) == ["1", "4"]
    assert {evaluation["model"] for evaluation in loads.values()} == {"served-stub"}
    assert loads["4"]["request"]["scenario"]["concurrency"] == 4


def test_a_workload_of_drawn_lengths_asks_each_request_for_its_own(
    stub: str, tmp_path: Path
) -> None:
    # Synthetic prompts and outputs of seeded lengths, as the field's load tools make them:
    # each timed request is one row's prompt, answered with exactly that row's output length.
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    asked = ("--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", stub)
    workload = ("--input-tokens", "uniform:4-40", "--output-tokens", "normal:8,3,2-14")
    run = dlscope(
        tmp_path,
        *("run", *asked, *workload, "-n", "24", "--min-duration", "0", "--seed", "5"),
        "--json",
        str(tmp_path / "run.json"),
    )
    assert run.returncode in COMPLETED, run.stdout + run.stderr
    document = json.loads((tmp_path / "run.json").read_text())
    scenario = document["evaluation"]["request"]["scenario"]
    assert scenario["output_tokens"] == {
        "distribution": "normal",
        "mean": 8,
        "stddev": 3.0,
        "min": 2,
        "max": 14,
    }  # recorded in the evaluation, so it replays
    assert document["evaluation"]["result"]["generation"]["failures"] == {}  # none short
    rows = list(
        zip(
            draw_lengths(parse_lengths("uniform:4-40"), WORKLOAD_ROWS, seed=5, purpose="input"),
            draw_lengths(parse_lengths("normal:8,3,2-14"), WORKLOAD_ROWS, seed=5, purpose="output"),
            strict=True,
        )
    )
    requests = document["events"][3]["payload"]["generation"]["requests"]
    timed = [(r["input_tokens"], r["counted_tokens"]) for r in requests]
    assert len(timed) >= 24
    # The requests take the rows in turn, from wherever the warm-up left off.
    start = rows.index(timed[0])
    assert timed == [rows[(start + i) % len(rows)] for i in range(len(timed))]
    assert len({out for _, out in timed}) > 3
    assert len({inp for inp, _ in timed}) > 3


def test_a_replayed_trace_sends_each_request_at_its_time_with_its_lengths(
    stub: str, tmp_path: Path
) -> None:
    # A Mooncake-format trace (the field's, as AIPerf reads it): bursts and gaps, each request
    # its own prompt and output length.
    rows = [(0, 6, 3), (0, 20, 9), (150, 11, 5), (400, 4, 12), (400, 30, 2), (420, 9, 7)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 5000 + at, "input_length": i, "output_length": o}) + "\n"
            for at, i, o in rows
        )
    )
    tokenizer = write_stub_tokenizer(tmp_path / "tokenizer.json")
    asked = ("--served-model", MODEL, "--tokenizer", str(tokenizer), "--endpoint", stub)
    run = dlscope(
        tmp_path,
        *("run", *asked, "--scenario", "server", "--replay", str(trace), "--warmup", "0"),
        *("--json", str(tmp_path / "run.json")),
    )
    assert run.returncode in COMPLETED, run.stdout + run.stderr
    shown = " ".join(run.stdout.split())
    assert "server (native driver, a replayed trace)" in shown
    assert "workload: replay of 6 requests over 0.4 s (trace.jsonl, sha256 " in shown
    document = json.loads((tmp_path / "run.json").read_text())
    replay = document["evaluation"]["request"]["scenario"]["replay"]
    assert replay["at_ms"] == [5000 + at for at, _, _ in rows]  # recorded, so it replays
    assert replay["source"].startswith("trace.jsonl, sha256 ")
    generation = document["evaluation"]["result"]["generation"]
    assert generation["failures"] == {}
    requests = document["events"][3]["payload"]["generation"]["requests"]
    # Every request of the trace, once, at its offset, with its prompt and output lengths.
    start = min(r["scheduled_ns"] for r in requests)
    sent = sorted(
        ((r["scheduled_ns"] - start) // 1_000_000, r["input_tokens"], r["counted_tokens"])
        for r in requests
    )
    assert sent == sorted(rows)
