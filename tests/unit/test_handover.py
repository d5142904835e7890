"""The worker names the framework process's functions rather than importing them (it must not
import the framework side): each name must resolve to a function that takes the session and
answers with the type the worker expects."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

from services.workers import handover
from services.workers.framework.session import Session
from services.workers.handover import FrameworkCall

CALLS = {name: value for name, value in vars(handover).items() if isinstance(value, FrameworkCall)}


def test_the_handover_names_the_measurement_of_a_job() -> None:
    assert "MEASURE_JOB" in CALLS


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_framework_call_names_a_function_of_the_framework_side_with_its_answer(
    name: str,
) -> None:
    call = CALLS[name]
    module, _, function_name = call.target.partition(":")
    assert module.startswith("services.workers.framework."), call.target
    function = getattr(importlib.import_module(module), function_name)
    hints = typing.get_type_hints(function)
    first = next(iter(inspect.signature(function).parameters))
    assert hints[first] is Session  # the framework process passes its session first
    assert hints["return"] is call.answers
