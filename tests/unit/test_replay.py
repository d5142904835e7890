"""A timed trace replayed against a served model: read from the Mooncake format a line at a
time (each bad line refused naming it), checked in the scenario (server only, the native
driver, no drawn lengths, no data set), turned into a plan whose run is the trace, and issued
by the open loop at the trace's own times, request ``i`` with prompt ``i``."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError

from dlscope.cli.scenario_options import _replay
from shared.measurement.paced import open_loop
from shared.measurement.progress import ignore_steps
from shared.messages import MAX_REPLAYED, EvaluationRequested, Replay, Scenario, read_replay

MS = 1_000_000


def _lines(*entries: tuple[float, int, int]) -> list[str]:
    return [
        json.dumps({"timestamp": at, "input_length": i, "output_length": o, "hash_ids": [1]})
        for at, i, o in entries
    ]


def test_a_mooncake_trace_reads_as_its_schedule_and_lengths() -> None:
    replay = read_replay(
        ["", *_lines((1000, 12, 4), (1000, 30, 9), (1250.5, 7, 2)), ""], name="day.jsonl"
    )
    assert replay.at_ms == (1000.0, 1000.0, 1250.5)
    assert replay.input_tokens == (12, 30, 7)
    assert replay.output_tokens == (4, 9, 2)
    assert replay.offsets_ns() == [0, 0, 250_500_000]  # from the first arrival
    assert replay.rate == pytest.approx(3 / 0.2505)
    assert replay.source.startswith("day.jsonl, sha256 ")
    assert str(replay).startswith("replay of 3 requests over 0.3 s")


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["{"], "line 1: not JSON"),
        (["[1, 2, 3]"], "line 1: a JSON object a line, not list"),
        (['{"input_length": 1, "output_length": 1}'], "line 1: 'timestamp' (ms) must be"),
        (
            ['{"timestamp": NaN, "input_length": 1, "output_length": 1}'],
            "'timestamp' (ms) must be a number, not nan",
        ),
        (
            ['{"timestamp": true, "input_length": 1, "output_length": 1}'],
            "'timestamp' (ms) must be a number, not True",
        ),
        (_lines((1e12, 1, 1)), "the trace's times are milliseconds"),
        (_lines((0, 0, 1)), "'input_length' must be a whole number of tokens from 1"),
        (
            ['{"timestamp": 0, "input_length": 1, "output_length": 2.5}'],
            "'output_length' must be a whole number of tokens from 1 to 131072, not 2.5",
        ),
        (_lines((0, 1, 1), (0, 1, 2**64)), "line 2: 'output_length'"),
        (["", "  "], "holds no request"),
        (_lines((5, 1, 1), (4, 1, 1)), "request 1 arrives at 4.0 ms, before request 0"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_line(lines: list[str], said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        read_replay(lines, name="t.jsonl")


def test_a_trace_past_its_bound_is_refused_before_it_is_held() -> None:
    def endless() -> object:
        n = 0
        while True:
            yield json.dumps({"timestamp": n, "input_length": 1, "output_length": 1})
            n += 1

    with pytest.raises(ValueError, match=f"at most {MAX_REPLAYED} requests"):
        read_replay(endless(), name="endless")  # type: ignore[arg-type]


def test_the_wire_replay_takes_aligned_finite_columns_only() -> None:
    with pytest.raises(ValidationError, match="one length each, not 2, 1 and 1"):
        Replay(at_ms=(0, 1), input_tokens=(1,), output_tokens=(1,))
    with pytest.raises(ValidationError, match="finite"):
        Replay.model_validate_json(
            '{"at_ms": [Infinity], "input_tokens": [1], "output_tokens": [1]}'
        )
    with pytest.raises(ValidationError, match="at most 20000"):
        Replay(at_ms=(0,) * 20_001, input_tokens=(1,) * 20_001, output_tokens=(1,) * 20_001)


REPLAY = Replay(at_ms=(0, 40, 40, 90), input_tokens=(5, 6, 7, 8), output_tokens=(3, 1, 4, 2))


def test_a_replayed_run_is_the_trace() -> None:
    scenario = Scenario(name="server", replay=REPLAY, iterations=500, min_duration_s=5)
    plan = scenario.measurement()
    assert plan.name == "server"
    assert plan.arrivals == "replay"
    assert plan.min_query_count == 4  # its requests, not the iterations asked
    assert plan.min_duration_s == 0  # its span, not the minimum asked
    assert plan.target_qps == pytest.approx(4 / 0.09)
    assert scenario.longest_output == 4
    # Recorded whole in the evaluation, so it replays.
    again = Scenario.model_validate(scenario.model_dump(mode="json"))
    assert again.replay == REPLAY


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"name": "single-stream"}, "it runs in the server scenario"),
        ({"name": "server", "driver": "loadgen"}, "replays on the native driver"),
        (
            {"name": "server", "output_tokens": {"distribution": "fixed", "tokens": 4}},
            "leave input_tokens and output_tokens out",
        ),
    ],
)
def test_a_replay_outside_its_scenario_is_refused(fields: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        Scenario.model_validate({**fields, "replay": REPLAY.model_dump(mode="json")})


def test_a_replay_beside_a_data_set_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"scenario\.replay makes synthetic prompts"):
        EvaluationRequested(
            evaluation_id=uuid.uuid4(),
            model="smollm2",
            framework="endpoint",
            dataset="tiny-stories",
            scenario=Scenario(name="server", replay=REPLAY),
        )


def test_the_cli_reads_the_file_and_names_it_in_every_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(_lines((0, 5, 3), (20, 6, 1))) + "\n")
    assert _replay(trace)["output_tokens"] == [3, 1]
    trace.write_text("\n".join([*_lines((0, 5, 3)), "oops"]))
    for path, said in (
        (trace, "trace.jsonl: line 2: not JSON"),
        (tmp_path / "missing.jsonl", "missing.jsonl: cannot read it (No such file or directory)"),
    ):
        with pytest.raises(typer.Exit):
            _replay(path)
        assert said in capsys.readouterr().err


@dataclass
class _Request:
    issued_ns: int
    ended_ns: int
    prompt: int
    failure: str | None = None
    cause: str | None = None

    @property
    def finished_ns(self) -> int:
        return self.ended_ns


async def test_the_open_loop_issues_each_request_at_its_traces_time() -> None:
    taken: list[tuple[int, int]] = []

    async def generate(prompt: int) -> _Request:
        issued = time.perf_counter_ns()
        taken.append((prompt, issued))
        await asyncio.sleep(0.001)
        return _Request(issued, time.perf_counter_ns(), prompt)

    scenario = Scenario(name="server", replay=REPLAY, warmup=0)
    plan = scenario.measurement()
    result, timed, failed, lags = await open_loop(
        plan,  # type: ignore[arg-type]
        generate,
        REPLAY.count,
        load_ns=0,
        on_step=ignore_steps,
        watch=None,
        arrivals_ns=REPLAY.offsets_ns(),
    )
    assert failed == []
    assert sorted(r.prompt for r in timed) == [0, 1, 2, 3]  # request i took prompt i
    issued = dict(taken[-4:])
    # Issued on the trace's schedule, each late by its recorded lag only.
    by_prompt = {r.prompt: r.issued_ns - lag for r, lag in zip(timed, lags, strict=True)}
    origin = by_prompt[0]
    assert [by_prompt[p] - origin for p in range(4)] == [0, 40 * MS, 40 * MS, 90 * MS]
    assert all(issued[p] >= by_prompt[p] for p in range(4))
    assert result.phases[0].stopped_by == "schedule"
