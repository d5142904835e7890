"""A generative workload's lengths: the distributions a scenario names, on the wire and on
the CLI, drawn the same way every time, and synthetic prompts of exactly the lengths drawn."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from harness.stub_tokenizer import write_stub_tokenizer
from shared.measurement.workload import WORKLOAD_ROWS, draw_lengths
from shared.messages import EvaluationRequested, Scenario
from shared.messages.lengths import FixedLength, NormalLengths, UniformLengths, parse_lengths
from shared.processing.text import load_tokenizer, synthetic_texts_of


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("128", FixedLength(tokens=128)),
        ("uniform:64-192", UniformLengths(distribution="uniform", min=64, max=192)),
        ("normal:128,32", NormalLengths(distribution="normal", mean=128, stddev=32)),
        (
            "normal:128,32.5,16-256",
            NormalLengths(distribution="normal", mean=128, stddev=32.5, min=16, max=256),
        ),
    ],
)
def test_a_cli_word_names_a_distribution(word: str, expected: object) -> None:
    assert parse_lengths(word) == expected


@pytest.mark.parametrize(
    ("word", "said"),
    [
        ("abc", "is not a length distribution: give N, uniform:MIN-MAX"),
        ("0", "greater than or equal to 1"),
        ("uniform:9-3", "min (9) exceeds max (3)"),
        ("normal:128,32,200-300", "the mean (128) must lie within min (200) and max (300)"),
        ("999999", "less than or equal to 131072"),
        ("normal:128,nan", "is not a length distribution"),
    ],
)
def test_a_bad_word_is_refused_saying_what_is_wrong(word: str, said: str) -> None:
    with pytest.raises(ValueError, match=r"^'") as refused:
        parse_lengths(word)
    assert said in str(refused.value)
    assert "Value error" not in str(refused.value)


def test_draws_are_seeded_bounded_and_follow_their_distribution() -> None:
    normal = NormalLengths(distribution="normal", mean=128, stddev=32)
    drawn = draw_lengths(normal, WORKLOAD_ROWS, seed=3, purpose="output")
    assert drawn == draw_lengths(normal, WORKLOAD_ROWS, seed=3, purpose="output")
    assert drawn != draw_lengths(normal, WORKLOAD_ROWS, seed=4, purpose="output")
    assert drawn != draw_lengths(normal, WORKLOAD_ROWS, seed=3, purpose="input")
    assert abs(np.mean(drawn) - 128) < 5
    assert abs(np.std(drawn) - 32) < 4
    assert min(drawn) >= 1
    assert max(drawn) <= normal.longest == 256
    narrow = NormalLengths(distribution="normal", mean=10, stddev=100, min=5, max=20)
    clipped = draw_lengths(narrow, WORKLOAD_ROWS, seed=0, purpose="input")
    assert {min(clipped), max(clipped)} == {5, 20}
    uniform = draw_lengths(
        UniformLengths(distribution="uniform", min=2, max=4), WORKLOAD_ROWS, seed=0, purpose="input"
    )
    assert set(uniform) == {2, 3, 4}  # both ends included
    assert draw_lengths(FixedLength(tokens=7), 3, seed=0, purpose="input") == [7, 7, 7]


def test_a_scenario_carries_its_workload_and_refuses_an_output_no_request_may_ask() -> None:
    scenario = Scenario.model_validate(
        {
            "output_tokens": {"distribution": "uniform", "min": 8, "max": 64},
            "input_tokens": {"distribution": "fixed", "tokens": 100},
        }
    )
    assert scenario.longest_output == 64
    assert Scenario.model_validate(scenario.model_dump(mode="json")) == scenario  # it replays
    assert Scenario().longest_output == Scenario().max_new_tokens
    with pytest.raises(
        ValidationError,
        match="output_tokens: at most 32768 tokens a request, and uniform 8-40000 asks up to 40000",
    ):
        Scenario.model_validate(
            {"output_tokens": {"distribution": "uniform", "min": 8, "max": 40000}}
        )
    with pytest.raises(ValidationError, match="stddev"):
        Scenario.model_validate(
            {"output_tokens": {"distribution": "normal", "mean": 8, "stddev": float("nan")}}
        )
    with pytest.raises(ValidationError, match="distribution"):
        Scenario.model_validate({"output_tokens": {"distribution": "zipf", "tokens": 8}})


def test_synthetic_prompts_and_a_data_set_do_not_go_together() -> None:
    with pytest.raises(ValidationError, match="input_tokens makes synthetic prompts"):
        EvaluationRequested(
            evaluation_id=uuid.uuid4(),
            model="smollm2",
            framework="onnxruntime",
            dataset="tiny-stories",
            scenario=Scenario.model_validate(
                {"input_tokens": {"distribution": "fixed", "tokens": 16}}
            ),
        )


def test_synthetic_prompts_have_exactly_the_lengths_drawn(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(str(write_stub_tokenizer(tmp_path / "tokenizer.json")))
    lengths = [1, 5, 64, 300]
    texts = synthetic_texts_of(tokenizer, lengths, seed=0)
    assert [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts] == lengths
    assert texts == synthetic_texts_of(tokenizer, lengths, seed=0)
    assert texts != synthetic_texts_of(tokenizer, lengths, seed=1)
