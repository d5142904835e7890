"""Every input the gateway takes is bounded, as a client meets it, on the embedded stack and
on RabbitMQ + PostgreSQL: a body over its bound is 413 before it is read whole; a field too
long is 422 naming the field and the limit, quoting little of it; NUL and text that is not
Unicode are 422 wherever they are (query, path, body), never a server error; and nothing of
a refused request is stored."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from harness.waiting import evaluation_outcome
from tests.integration.conftest import Stack

# One stack a module (tests/integration/conftest.py): these tests store nothing but the
# evaluation the last one leaves running, and count what is stored within themselves.
pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture
def any_stack(module_stack: Stack) -> Stack:
    return module_stack


def evaluation(**changes: Any) -> dict[str, Any]:
    return {"model": "squeezenet", "framework": "onnxruntime", **changes}


async def stored_evaluations(stack: Stack) -> int:
    return len((await stack.http.get("/v1/evaluations", params={"limit": 1000})).json())


async def test_a_body_over_its_bound_is_refused_before_it_is_read(any_stack: Stack) -> None:
    before = await stored_evaluations(any_stack)
    huge = (
        b'{"model": "squeezenet", "framework": "onnxruntime", "agent_id": "'
        + b"a" * (50 * 1024**2)
        + b'"}'
    )
    began = time.perf_counter()
    response = await any_stack.http.post(
        "/v1/evaluations", content=huge, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json() == {
        "detail": "the request body is over 1048576 bytes (DLSCOPE_MAX_BODY_BYTES)"
    }
    assert time.perf_counter() - began < 10

    # Sent in chunks, with no Content-Length to go by: refused on the bytes that came.
    async def chunks() -> Any:
        for _ in range(40):
            yield b" " * 65536

    chunked = await any_stack.http.post(
        "/v1/evaluations", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    assert await stored_evaluations(any_stack) == before


async def test_a_field_too_long_is_named_with_its_limit_and_not_echoed(any_stack: Stack) -> None:
    before = await stored_evaluations(any_stack)
    response = await any_stack.http.post("/v1/evaluations", json=evaluation(agent_id="a" * 500_000))
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "agent_id"]
    assert error["msg"] == "String should have at most 256 characters"
    assert len(response.content) < 1024  # a prefix of the input at most, not 500 000 bytes
    experiment = await any_stack.http.post("/v1/experiments", json={"models": ["squeezenet"] * 100})
    assert experiment.status_code == 422
    assert experiment.json()["detail"][0]["loc"] == ["body", "models"]
    assert "at most 64 items" in experiment.json()["detail"][0]["msg"]
    assert await stored_evaluations(any_stack) == before


@pytest.mark.parametrize(
    ("path", "loc"),
    [
        ("/v1/models?task=%00", ["query", "task"]),
        ("/v1/experiments?model=a%00b", ["query", "model"]),
        ("/v1/evaluations?unknown=%00", ["query", "unknown"]),
        ("/v1/evaluations?model=%ff%fe", ["query"]),
        ("/v1/history?model=%00&framework=onnxruntime&hardware=cpu", ["query", "model"]),
        ("/v1/models/a%00b", ["path"]),
        ("/v1/evaluations/%ed%a0%80/events", None),
    ],
)
async def test_nul_and_non_unicode_in_a_query_or_path_are_refused_at_once(
    any_stack: Stack, path: str, loc: list[str] | None
) -> None:
    began = time.perf_counter()
    response = await any_stack.http.get(path)
    assert time.perf_counter() - began < 3  # never a wait for a service that fails on it
    assert response.status_code in ((422,) if loc is not None else (404, 422)), response.text
    if loc is not None:
        assert response.json()["detail"][0]["loc"] == loc


@pytest.mark.parametrize(
    ("body", "loc", "what"),
    [
        (b'{"model": "squeeze\\u0000net", "framework": "onnxruntime"}', ["body", "model"], "NUL"),
        (
            b'{"model": "squeezenet", "framework": "onnxruntime", "scenario": {"\\u0000": 1}}',
            ["body", "scenario", "\x00"],
            "NUL",
        ),
        (b'{"model": "\\ud800", "framework": "onnxruntime"}', ["body"], "not Unicode"),
        (b'{"model": "\xff\xfe", "framework": "onnxruntime"}', ["body"], "not Unicode"),
    ],
)
async def test_nul_and_non_unicode_in_a_body_are_refused_naming_where(
    any_stack: Stack, body: bytes, loc: list[str], what: str
) -> None:
    before = await stored_evaluations(any_stack)
    response = await any_stack.http.post(
        "/v1/evaluations", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == loc
    assert what in error["msg"]
    assert await stored_evaluations(any_stack) == before


async def test_a_manifest_with_nul_in_yaml_is_refused_naming_the_field(any_stack: Stack) -> None:
    response = await any_stack.http.post(
        "/v1/models",
        content=b'name: n\nversion: 1.0.0\ndescription: "a\\0b"\n',
        headers={"content-type": "application/yaml"},
    )
    assert response.status_code == 422
    assert "description: the text holds a NUL character" in response.json()["detail"]


async def test_an_unknown_content_type_names_little_of_itself(any_stack: Stack) -> None:
    response = await any_stack.http.post(
        "/v1/models", content=b"x", headers={"content-type": "text/" + "x" * 10_000}
    )
    assert response.status_code == 415
    assert len(response.content) < 1024


# Every number a request carries, with what JSON can say that no bound should let through.
NOT_FINITE = ("NaN", "Infinity", "-Infinity", "1e309")
FLOAT_FIELDS = (
    "min_duration_s",
    "max_duration_s",
    "target_qps",
    "latency_bound_ms",
    "adaptive_half_width",
    "temperature",
    "ttft_bound_ms",
    "tpot_bound_ms",
    "e2e_bound_ms",
    "slo_percentile",
)


@pytest.mark.parametrize("value", NOT_FINITE)
async def test_a_number_that_is_not_finite_is_a_422_naming_its_field(
    any_stack: Stack, value: str
) -> None:
    # NaN passes every comparison's bound and Infinity every lower one: each is refused by
    # name, over both routes, and the 422 itself is JSON (NaN cannot be written back as one).
    before = await stored_evaluations(any_stack)
    headers = {"content-type": "application/json"}
    for field in FLOAT_FIELDS:
        scenario = f'{{"name": "server", "{field}": {value}}}'
        body = f'{{"model": "squeezenet", "framework": "onnxruntime", "scenario": {scenario}}}'
        response = await any_stack.http.post("/v1/evaluations", content=body, headers=headers)
        assert response.status_code == 422, (field, response.text)
        locs = [error["loc"] for error in response.json()["detail"]]
        assert ["body", "scenario", field] in locs, (field, locs)
    stddev = (
        '{"model": "smollm2", "framework": "onnxruntime", "scenario": {"output_tokens": '
        f'{{"distribution": "normal", "mean": 8, "stddev": {value}}}}}}}'
    )
    response = await any_stack.http.post("/v1/evaluations", content=stddev, headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "stddev"
    for field, where in (
        ('"tolerance": {"atol": %s}', ["body", "tolerance", "atol"]),
        ('"tolerance": {"min_top1_agreement": %s}', ["body", "tolerance", "min_top1_agreement"]),
        ('"timeout_s": %s', ["body", "timeout_s"]),
    ):
        body = '{"model": "digits-cnn", %s}' % (field % value)
        response = await any_stack.http.post("/v1/experiments", content=body, headers=headers)
        assert response.status_code == 422, (field, response.text)
        assert where in [error["loc"] for error in response.json()["detail"]], response.text
    assert await stored_evaluations(any_stack) == before


async def test_an_integer_no_column_holds_is_a_422_naming_its_field(any_stack: Stack) -> None:
    before = await stored_evaluations(any_stack)
    for scenario, loc in (
        ({"seed": 2**64}, ["body", "scenario", "seed"]),
        ({"seed": 2**63}, ["body", "scenario", "seed"]),
        (
            {"name": "batch-sweep", "batch_sizes": [1, 2**64]},
            ["body", "scenario", "batch_sizes", 1],
        ),
    ):
        response = await any_stack.http.post("/v1/evaluations", json=evaluation(scenario=scenario))
        assert response.status_code == 422, (scenario, response.text)
        assert loc in [error["loc"] for error in response.json()["detail"]], response.text
    assert await stored_evaluations(any_stack) == before


async def test_where_to_follow_an_accepted_request_ignores_the_host_header(
    any_stack: Stack,
) -> None:
    # A client writes the Host header: a 202 must not send the next request, with its
    # token, to whoever it names.
    body = {"model": "squeezenet", "framework": "onnxruntime", "scenario": {"iterations": 1}}
    response = await any_stack.http.post(
        "/v1/evaluations", json=body, headers={"Host": "attacker.example"}
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["status_url"] == f"/v1/evaluations/{accepted['id']}"
    assert "attacker" not in response.text
    # Followed where it says, it ends; and it is in no other test's count of evaluations.
    assert (await evaluation_outcome(any_stack.http, accepted["id"]))["status"] == "completed"


async def test_a_refused_request_leaves_the_gateway_serving(any_stack: Stack) -> None:
    for _ in range(3):
        await any_stack.http.get("/v1/models?task=%00")
    accepted = await any_stack.http.post(
        "/v1/evaluations",
        json=evaluation(scenario={"iterations": 3, "min_duration_s": 0, "warmup": 0}),
    )
    assert accepted.status_code == 202
    assert uuid.UUID(accepted.json()["id"])
