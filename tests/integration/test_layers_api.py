"""Trace levels and layer breakdowns over HTTP, on the embedded stack and on RabbitMQ +
PostgreSQL: an evaluation asks for ``trace_level``; at ``framework`` its result reports each
level's overhead and ``GET /v1/evaluations/{id}/layers`` gives its layers from the event
store; an unknown level is refused naming the allowed ones."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack

# One stack a module (tests/integration/conftest.py): each test reads the layers of its own
# evaluations, by id.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def any_stack(module_stack: Stack) -> Stack:
    return module_stack


async def test_a_framework_level_evaluation_keeps_its_layers(any_stack: Stack) -> None:
    http = any_stack.http
    traced = await any_stack.evaluate("squeezenet", trace_level="framework", trace_queries=2)
    assert traced["status"] == "completed", traced["error"]
    levels = {outcome["level"]: outcome for outcome in traced["result"]["tracing"]}
    assert list(levels) == ["application", "model", "framework"]
    assert levels["framework"]["source"] == "onnxruntime session profiling"
    assert levels["framework"]["overhead"] > 0
    assert levels["framework"]["queries"] == 2
    assert levels["framework"]["spans"] > 2  # the pass, its queries, their nodes

    response = await http.get(f"/v1/evaluations/{traced['id']}/layers", params={"top": 3})
    assert response.status_code == 200, response.text
    layers = response.json()
    assert layers["framework"] == "onnxruntime"
    assert layers["trace_level"] == "framework"
    (framework,) = layers["passes"]
    assert framework["level"] == "framework"
    assert len(framework["top"]) == 3
    # Ranked by the median call times calls per query (a cold call does not lead).
    typical = [layer["per_query_ns"] for layer in framework["top"]]
    assert typical == sorted(typical, reverse=True)
    assert all(layer["per_query_ns"] == layer["p50_ns"] for layer in framework["top"])
    assert framework["layers_total"] > 3
    op_types = framework["op_types"]
    assert [t["per_query_ns"] for t in op_types] == sorted(
        (t["per_query_ns"] for t in op_types), reverse=True
    )
    # SqueezeNet is convolutions: no op type has more layers. (Which one takes the most time
    # depends on the CPU and the moment: on an AMD Zen 5 its Concats once outlasted its Convs
    # over two profiled queries.)
    conv = next(t for t in op_types if t["op_type"] == "Conv")
    assert conv["layers"] == max(t["layers"] for t in op_types)
    assert all(layer["calls"] == 2 for layer in framework["top"])
    assert framework["top"][0]["input_shapes"]

    # A second evaluation of the same graph lines up node by node.
    again = await any_stack.evaluate("squeezenet", trace_level="framework", trace_queries=1)
    response = await http.get(
        f"/v1/evaluations/{traced['id']}/layers", params={"compare": again["id"]}
    )
    assert response.status_code == 200, response.text
    comparison = response.json()["comparison"]
    assert [e["evaluation_id"] for e in comparison["evaluations"]] == [traced["id"], again["id"]]
    assert all(row["matched_by"] == "name" for row in comparison["rows"])
    assert all(all(row["layers"]) for row in comparison["rows"])

    response = await http.get(
        f"/v1/evaluations/{traced['id']}/layers", params={"level": "hardware"}
    )
    assert response.status_code == 404
    assert "has no hardware pass; it has: framework" in response.json()["detail"]


async def test_layers_of_an_evaluation_at_model_level_say_what_to_ask_for(
    any_stack: Stack,
) -> None:
    plain = await any_stack.evaluate("squeezenet")
    assert plain["status"] == "completed", plain["error"]
    assert [o["level"] for o in plain["result"]["tracing"]] == ["application", "model"]
    response = await any_stack.http.get(f"/v1/evaluations/{plain['id']}/layers")
    assert response.status_code == 404
    assert "trace_level 'framework'" in response.json()["detail"]


async def test_an_unknown_trace_level_is_refused_naming_the_allowed_ones(
    any_stack: Stack,
) -> None:
    response = await any_stack.http.post(
        "/v1/evaluations",
        json={"model": "squeezenet", "framework": "onnxruntime", "trace_level": "kernels"},
    )
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", "trace_level"]
    assert "'none', 'application', 'model', 'framework', 'library', 'hardware'" in problem["msg"]
