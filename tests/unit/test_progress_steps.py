"""What a run tells the person waiting: each warm-up and timed phase as it begins, with an
estimate of how long the timed phase takes that follows the model's speed, and the wording
the command line shows for it."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Sequence

import pytest
from rich.console import Console
from rich.progress import Progress

from dlscope.cli.live import LINES_ENV, LiveEvaluations, columns, parse_line
from shared.config import Settings
from shared.measurement import (
    BatchSweep,
    Offline,
    ScenarioPlan,
    Server,
    SingleStream,
    WarmupSettings,
    run_scenario,
)
from shared.measurement.progress import SCENARIO, WAITING_FOR_DEVICE, Step

QUICK_WARMUP = WarmupSettings(window_queries=8, max_windows=3)


def sleeping(seconds: float) -> Callable[[Sequence[int]], None]:
    def call(indices: Sequence[int]) -> None:
        time.sleep(seconds)

    return call


def steps_of(scenario: ScenarioPlan, seconds: float = 0.0) -> list[Step]:
    steps: list[Step] = []
    run_scenario(scenario, sleeping(seconds), sample_count=8, on_step=steps.append)
    return steps


@pytest.mark.parametrize(
    "scenario",
    [
        SingleStream(min_query_count=16, min_duration_s=0, warmup=QUICK_WARMUP),
        Offline(batch_size=4, min_sample_count=8, min_duration_s=0, warmup=QUICK_WARMUP),
        Server(target_qps=2000, min_query_count=16, min_duration_s=0, warmup=QUICK_WARMUP),
    ],
    ids=lambda s: s.name,
)
def test_every_scenario_tells_its_warm_up_then_its_timed_queries(scenario: ScenarioPlan) -> None:
    steps = steps_of(scenario)
    assert [(s.phase, s.part) for s in steps] == [
        (SCENARIO, "warming up"),
        (SCENARIO, "timed queries"),
    ]
    warm, timed = steps
    assert warm.limit_s == scenario.warmup.max_duration_s
    assert warm.expected_s is None
    assert timed.limit_s == scenario.max_duration_s
    assert timed.expected_s is not None
    assert 0 <= timed.expected_s <= scenario.max_duration_s


def test_a_batch_sweep_tells_each_batch_size_in_turn() -> None:
    sweep = BatchSweep(batch_sizes=(1, 4), min_query_count=8, min_duration_s=0, warmup=QUICK_WARMUP)
    assert [s.part for s in steps_of(sweep)] == [
        "warming up, batch 1 (1 of 2)",
        "timed queries, batch 1 (1 of 2)",
        "warming up, batch 4 (2 of 2)",
        "timed queries, batch 4 (2 of 2)",
    ]


def test_the_timed_estimate_follows_the_model_and_the_minimum_duration() -> None:
    # 100 queries of ~2 ms: about 0.2 s, whatever the minimum duration below it says.
    by_count = SingleStream(min_query_count=100, min_duration_s=0.05, warmup=QUICK_WARMUP)
    estimate = steps_of(by_count, seconds=0.002)[-1].expected_s
    assert estimate is not None
    assert 0.19 <= estimate <= 0.5
    # A minimum duration longer than the queries need: it sets the estimate.
    by_time = SingleStream(min_query_count=4, min_duration_s=0.3, warmup=QUICK_WARMUP)
    assert steps_of(by_time, seconds=0.002)[-1].expected_s == pytest.approx(0.3)


def render(live: LiveEvaluations) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    console.print(live.display.make_tasks_table(live.display.tasks))
    return out.getvalue()


def test_the_command_line_shows_the_step_with_elapsed_and_remaining_time() -> None:
    live = LiveEvaluations(Progress(*columns()))
    key = "6f0c2c4e-0000-4000-8000-000000000001"
    live.observe("evaluation.requested", {"evaluation_id": key, "model": "m", "framework": "f"})
    live.observe("evaluation.scheduled", {"evaluation_id": key})
    assert "m on f: waiting for a worker" in render(live)

    live.observe(
        "evaluation.progress",
        {"evaluation_id": key, "phase": SCENARIO, "part": "warming up", "limit_s": 5.0},
    )
    assert "m on f: warming up" in render(live)
    assert "at most 5.0 s" in render(live)

    live.observe(
        "evaluation.progress",
        {"evaluation_id": key, "phase": SCENARIO, "part": "timed queries", "expected_s": 60.0},
    )
    shown = render(live)
    assert "m on f: timed queries" in shown
    assert "of ~1 min 00 s" in shown
    assert "left" in shown

    live.observe("evaluation.progress", {"evaluation_id": key, "phase": "measuring accuracy"})
    assert "m on f: measuring accuracy" in render(live)

    live.observe("evaluation.failed", {"evaluation_id": key, "reason": "predictor: boom"})
    shown = render(live)
    assert "m on f: failed: predictor: boom" in shown
    assert "left" not in shown


def test_a_child_run_writes_its_events_as_lines_its_parent_reads_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As ``--repeat`` starts a child run, and as the child's client reads its settings.
    monkeypatch.setenv(LINES_ENV, "lines")
    event = {"evaluation_id": "e", "phase": SCENARIO, "part": "timed queries", "expected_s": 2.5}
    with LiveEvaluations(lines=Settings().progress == "lines") as child:
        child.observe("evaluation.progress", event)
    lines = capsys.readouterr().err.splitlines()
    assert [parse_line(line) for line in lines] == [("evaluation.progress", event)]
    assert parse_line("error: something else the child said") is None


def test_a_wait_for_the_device_is_said_in_a_line_even_without_a_terminal() -> None:
    out = io.StringIO()
    # A console on a file, as stderr is under a CI job or a pipe: no row is drawn there.
    live = LiveEvaluations(Progress(*columns(), console=Console(file=out, width=200)))
    key = "6f0c2c4e-0000-4000-8000-000000000002"
    part = "waiting for the device cpu0-1, held by evaluation 1a2b3c4d on agent host-ort-cpu"
    live.observe("evaluation.requested", {"evaluation_id": key, "model": "m", "framework": "f"})
    wait = {"evaluation_id": key, "phase": WAITING_FOR_DEVICE, "part": part, "limit_s": 590.0}
    live.observe("evaluation.progress", wait)
    live.observe("evaluation.progress", wait)  # asked again, the same holder: said once
    live.observe("evaluation.progress", {"evaluation_id": key, "phase": "loading the model"})
    live.observe("evaluation.progress", {"evaluation_id": key, "phase": "measuring accuracy"})
    lines = out.getvalue().splitlines()
    assert lines[0] == f"m on f: {part} (at most 9 min 50 s)"
    assert re.fullmatch(r"m on f: got the device after \d+\.\d s", lines[1])
    assert len(lines) == 2
