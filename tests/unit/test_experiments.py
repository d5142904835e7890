"""Experiments as pure decisions: which models are the same model, the scheduler's plan, and
the analyzer's fold of the plan and the members' outcomes into a comparison."""

from __future__ import annotations

import uuid
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from rich.console import Console

from dlscope.cli.experiments import comparison_table, print_comparison
from services.analyzer.experiments import Experiment, compare, evolve
from services.scheduler.agents import AgentEntry
from services.scheduler.experiments import plan_experiment
from services.workers.framework.sessions.fingerprint import input_identity, output_fingerprint
from services.workers.framework.sessions.tokens import tokens_fingerprint
from shared.errors import ModelNotFound
from shared.manifests import ModelManifest
from shared.messages import (
    EvaluationCompleted,
    EvaluationFailed,
    ExperimentComparison,
    ExperimentFailed,
    ExperimentGap,
    ExperimentMember,
    ExperimentRequested,
    ExperimentScheduled,
    LatencySummary,
    MemberResult,
    ModelRef,
    OutputFingerprint,
    ParityTolerance,
    experiment_models,
    exports_of,
)

EXPERIMENT = uuid.uuid4()


def model(name: str, framework: str, needs: str = "*", **overrides: Any) -> ModelManifest:
    document: dict[str, Any] = {
        "name": name,
        "version": "1.0.0",
        "task": "image-classification",
        "framework": {"name": framework, "version": needs},
        "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        "outputs": [{"name": "logits", "shape": [-1, 10]}],
        "source": {"uri": f"/models/{name}", "sha256": "0" * 64},
        "attributes": {"training_dataset": "digits@1.0.0 train split"},
    }
    document.update(overrides)
    return ModelManifest.model_validate(document)


ONNX = model("digits-cnn", "onnxruntime")
TORCH = model("digits-cnn-torch", "pytorch")
TF = model("digits-cnn-tf", "tensorflow")


# --- which models are the same model --------------------------------------------------------


def test_the_exports_of_a_model_are_found_by_version_tensors_and_training_data() -> None:
    unrelated = [
        model("other-data", "pytorch", attributes={"training_dataset": "mnist"}),
        model("other-version", "tensorflow", version="2.0.0"),
        model("other-shape", "pytorch", outputs=[{"name": "logits", "shape": [-1, 11]}]),
    ]
    exports = exports_of(ONNX, [ONNX, TORCH, TF, *unrelated])
    assert {f: [m.name for m in found] for f, found in exports.items()} == {
        "onnxruntime": ["digits-cnn"],
        "pytorch": ["digits-cnn-torch"],
        "tensorflow": ["digits-cnn-tf"],
    }


def test_a_model_without_training_data_is_only_ever_itself() -> None:
    placeholder = model("squeezenet", "onnxruntime", attributes={"training_dataset": "none"})
    twin = model("squeezenet-torch", "pytorch", attributes={"training_dataset": "none"})
    assert exports_of(placeholder, [twin]) == {"onnxruntime": [placeholder]}


def test_an_experiment_takes_the_named_model_first_then_the_frameworks_asked_for() -> None:
    registered = [TF, TORCH, ONNX]
    assert next(m.name for m in experiment_models(TORCH, registered, "all")) == "digits-cnn-torch"
    chosen = experiment_models(ONNX, registered, ["tensorflow", "onnxruntime"])
    assert [m.name for m in chosen] == ["digits-cnn", "digits-cnn-tf"]


def test_a_framework_without_an_export_or_with_two_is_refused_with_the_reason() -> None:
    with pytest.raises(ModelNotFound, match=r"digits-cnn@1.0.0 has no export for opencl"):
        experiment_models(ONNX, [TORCH], ["opencl"])
    second = model("digits-cnn-torch-again", "pytorch")
    with pytest.raises(ModelNotFound, match=r"several models are digits-cnn@1.0.0 for pytorch"):
        experiment_models(ONNX, [TORCH, second], "all")


# --- the scheduler's plan -------------------------------------------------------------------


def agent(
    agent_id: str, framework: str, version: str = "1.0.0", hardware: str = "cpu"
) -> AgentEntry:
    return AgentEntry(
        agent_id=agent_id,
        host=f"host-{agent_id}",
        framework=framework,
        framework_version=version,
        hardware=hardware,
        heartbeat_interval_s=5.0,
        last_seen=0.0,
    )


def request(**overrides: Any) -> ExperimentRequested:
    return ExperimentRequested.model_validate(
        {
            "experiment_id": EXPERIMENT,
            "models": [{"model": "digits-cnn"}, {"model": "digits-cnn-torch"}],
            **overrides,
        }
    )


def resolved(*manifests: ModelManifest) -> list[tuple[ModelRef, ModelManifest | str]]:
    return [(ModelRef(model=m.name), m) for m in manifests]


def test_every_matching_online_agent_gets_one_member_with_a_stable_id() -> None:
    online = [agent("ort-1", "onnxruntime"), agent("ort-2", "onnxruntime"), agent("pt", "pytorch")]
    seed = uuid.uuid4()
    plan = plan_experiment(request(), resolved(ONNX, TORCH), online, seed=seed, deadline_s=60)
    assert isinstance(plan, ExperimentScheduled)
    assert [(m.model, m.agent_id) for m in plan.members] == [
        ("digits-cnn", "ort-1"),
        ("digits-cnn", "ort-2"),
        ("digits-cnn-torch", "pt"),
    ]
    assert plan.members[2].host == "host-pt"
    again = plan_experiment(request(), resolved(ONNX, TORCH), online, seed=seed, deadline_s=60)
    assert again == plan  # a redelivered request plans the same evaluations
    assert plan.skipped == []


def test_all_skips_a_framework_without_online_workers_and_says_why() -> None:
    plan = plan_experiment(
        request(),
        resolved(ONNX, TORCH),
        [agent("ort", "onnxruntime"), agent("gpu", "pytorch", hardware="gpu")],
        seed=uuid.uuid4(),
        deadline_s=60,
    )
    assert isinstance(plan, ExperimentScheduled)
    assert [m.agent_id for m in plan.members] == ["ort"]
    (gap,) = plan.skipped
    assert (gap.model, gap.framework) == ("digits-cnn-torch", "pytorch")
    assert gap.reason.startswith("no online worker offers pytorch * on cpu; available: ")


def test_versions_the_request_or_the_model_rules_out_are_not_matching() -> None:
    needs_new = model("digits-cnn", "onnxruntime", needs=">=2")
    online = [agent("old", "onnxruntime", "1.0.0"), agent("new", "onnxruntime", "2.1.0")]
    plan = plan_experiment(request(), resolved(needs_new), online, seed=uuid.uuid4(), deadline_s=1)
    assert isinstance(plan, ExperimentScheduled)
    assert [m.agent_id for m in plan.members] == ["new"]
    pinned = request(framework_version="<2")
    failed = plan_experiment(pinned, resolved(needs_new), online, seed=uuid.uuid4(), deadline_s=1)
    assert isinstance(failed, ExperimentFailed)
    assert "(the model needs onnxruntime >=2)" in failed.reason


def test_listed_frameworks_limit_the_members_and_missing_ones_are_named() -> None:
    online = [agent("ort", "onnxruntime"), agent("pt", "pytorch")]
    plan = plan_experiment(
        request(frameworks=["pytorch", "tensorflow"]),
        resolved(ONNX, TORCH),
        online,
        seed=uuid.uuid4(),
        deadline_s=60,
    )
    assert isinstance(plan, ExperimentScheduled)
    assert [m.framework for m in plan.members] == ["pytorch"]
    assert [(g.framework, g.reason) for g in plan.skipped] == [
        ("tensorflow", "none of the models (digits-cnn, digits-cnn-torch) is for tensorflow")
    ]


def test_nothing_to_run_fails_the_experiment_with_every_reason() -> None:
    failed = plan_experiment(
        request(),
        [(ModelRef(model="digits-cnn"), "unknown model 'digits-cnn'"), *resolved(TORCH)],
        [],
        seed=uuid.uuid4(),
        deadline_s=60,
    )
    assert isinstance(failed, ExperimentFailed)
    assert failed.reason.startswith("nothing to run: digits-cnn: unknown model 'digits-cnn'; ")
    assert "digits-cnn-torch: no online worker offers pytorch" in failed.reason


def test_a_request_lists_each_model_and_framework_once() -> None:
    with pytest.raises(ValueError, match="each model may be listed once"):
        request(models=[{"model": "a"}, {"model": "a"}])
    with pytest.raises(ValueError, match="list at least one framework"):
        request(frameworks=[])


# --- the analyzer's fold and comparison -----------------------------------------------------

MEMBERS = [
    ExperimentMember(
        evaluation_id=uuid.uuid4(),
        model=name,
        model_version="1.0.0",
        framework=framework,
        framework_version="1.0.0",
        agent_id=f"{framework}-agent",
        host="bench",
    )
    for name, framework in (
        ("digits-cnn", "onnxruntime"),
        ("digits-cnn-torch", "pytorch"),
        ("digits-cnn-tf", "tensorflow"),
    )
]
PLAN = ExperimentScheduled(
    experiment_id=EXPERIMENT,
    members=MEMBERS,
    skipped=[],
    tolerance=ParityTolerance(),
    deadline_s=600,
)
LOGITS = np.array([[0.1, 2.0, -1.0], [1.5, 0.2, 0.3]], dtype=np.float32)


def fingerprint(logits: np.ndarray) -> OutputFingerprint:
    inputs = {"input": np.ones((2, 1, 8, 8), np.float32)}
    identity = input_identity(ONNX, inputs, kind="synthetic", description="ones")
    return output_fingerprint(ONNX, identity, [logits])


def completed(member: ExperimentMember, p50_ms: float, logits: np.ndarray = LOGITS) -> Any:
    return EvaluationCompleted(
        evaluation_id=member.evaluation_id,
        experiment_id=EXPERIMENT,
        result=LatencySummary(
            count=100,
            batch_size=2,
            mean_ms=p50_ms + 0.1,
            std_ms=0.1,
            min_ms=p50_ms - 0.1,
            max_ms=p50_ms + 1,
            p50_ms=p50_ms,
            p90_ms=p50_ms + 0.2,
            p99_ms=p50_ms + 0.5,
            throughput_per_s=2000 / p50_ms,
            first_inference_ms=3.0,
            load_ms=10.0,
            warmup_count=10,
            fingerprint=fingerprint(logits),
        ),
    )


def failed(member: ExperimentMember, reason: str = "out of memory") -> EvaluationFailed:
    return EvaluationFailed(
        evaluation_id=member.evaluation_id,
        experiment_id=EXPERIMENT,
        stage="predictor",
        reason=reason,
    )


def fold(*events: Any) -> Experiment:
    state = None
    for event in events:
        state = evolve(state, event)
    assert state is not None
    return state


def test_an_experiment_is_settled_when_every_member_has_an_outcome_in_any_order() -> None:
    # Given outcomes that overtook the plan
    early = fold(completed(MEMBERS[2], 3.0), completed(MEMBERS[0], 1.0))
    assert not early.settled
    # When the plan and the last outcome arrive
    state = fold(completed(MEMBERS[2], 3.0), completed(MEMBERS[0], 1.0), PLAN)
    assert not state.settled
    state = evolve(state, completed(MEMBERS[1], 2.0))
    # Then it is settled, and the comparison lists the members in the plan's order
    assert state.settled
    comparison = compare(state)
    assert comparison.complete
    assert [r.framework for r in comparison.evaluations] == ["onnxruntime", "pytorch", "tensorflow"]
    assert [r.latency.p50_ms for r in comparison.evaluations if r.latency] == [1.0, 2.0, 3.0]
    assert comparison.reference == MEMBERS[0].evaluation_id
    # Every pair, each within tolerance on the same outputs
    assert [(p.reference, p.candidate) for p in comparison.parity] == [
        (MEMBERS[0].evaluation_id, MEMBERS[1].evaluation_id),
        (MEMBERS[0].evaluation_id, MEMBERS[2].evaluation_id),
        (MEMBERS[1].evaluation_id, MEMBERS[2].evaluation_id),
    ]
    assert comparison.parity_ok is True
    assert comparison.failures == []


def test_a_member_whose_outputs_differ_breaks_parity_with_the_reason() -> None:
    off = LOGITS.copy()
    off[1] = [0.2, 1.5, 0.3]
    state = fold(
        PLAN, completed(MEMBERS[0], 1.0), completed(MEMBERS[1], 2.0, off), failed(MEMBERS[2])
    )
    comparison = compare(state)
    assert comparison.parity_ok is False
    (pair,) = comparison.parity
    assert pair.top1_agreement == 0.5
    assert pair.reason is not None
    assert "top-1 agrees on 1 of 2 samples" in pair.reason


def test_failures_are_listed_with_their_reasons_and_a_members_first_outcome_stands() -> None:
    state = fold(
        PLAN,
        # a worker frozen past its failure woke and finished: too late, the failure stands
        failed(MEMBERS[0], "agent went offline"),
        completed(MEMBERS[0], 1.0),
        failed(MEMBERS[1], "CUDA out of memory"),
        failed(MEMBERS[1], "a later echo"),
        # and a failure after a completion is an echo
        completed(MEMBERS[2], 2.0),
        failed(MEMBERS[2], "timeout echo"),
    )
    comparison = compare(state)
    assert [r.status for r in comparison.evaluations] == ["failed", "failed", "completed"]
    assert [(f.framework, f.reason) for f in comparison.failures] == [
        ("onnxruntime", "predictor: agent went offline"),
        ("pytorch", "predictor: CUDA out of memory"),
    ]
    assert comparison.parity_ok is None  # one completed: nothing to compare it with
    assert comparison.reference == MEMBERS[2].evaluation_id


def test_at_the_deadline_members_without_an_outcome_are_missing() -> None:
    gap = ExperimentGap(framework="opencl", reason="no online worker offers opencl")
    plan = PLAN.model_copy(update={"skipped": [gap]})
    state = fold(plan, completed(MEMBERS[0], 1.0))
    comparison = compare(state)
    assert not comparison.complete
    assert [r.status for r in comparison.evaluations] == ["completed", "missing", "missing"]
    assert comparison.parity_ok is None  # fewer than two completed
    # What was never scheduled first, then the members that did not finish
    assert comparison.failures[0] == gap
    assert comparison.failures[1].reason == (
        "timeout: no outcome within 600 s of the experiment being scheduled"
    )


def test_after_the_comparison_later_events_change_nothing() -> None:
    done = Experiment(EXPERIMENT, compared=True)
    assert evolve(done, completed(MEMBERS[0], 1.0)) is done


def test_an_evaluation_outside_any_experiment_is_refused_by_the_fold() -> None:
    lone = EvaluationFailed(evaluation_id=uuid.uuid4(), stage="predictor", reason="x")
    with pytest.raises(ValueError, match="is in no experiment"):
        evolve(None, lone)


def test_two_workers_of_one_framework_on_one_host_are_told_apart_in_the_table() -> None:
    def member(agent: str) -> MemberResult:
        return MemberResult(
            evaluation_id=uuid.uuid4(),
            model="smollm2",
            model_version="1.0.0",
            framework="endpoint",
            framework_version="1",
            agent_id=agent,
            host="box",
            status="completed",
        )

    comparison = ExperimentComparison(
        complete=True,
        reference=None,
        tolerance=ParityTolerance(),
        evaluations=[
            member("server-a"),
            member("server-b"),
            member("server-a").model_copy(
                update={"framework": "onnxruntime", "framework_version": "1.24"}
            ),
        ],
        parity=[],
        parity_ok=None,
        failures=[],
    )
    console = Console(width=300, record=True)
    console.print(comparison_table("t", comparison))
    shown = console.export_text()
    assert "box (server-a)" in shown
    assert "box (server-b)" in shown
    assert shown.count("(server-a)") == 1, "a system alone on its host keeps the plain host"


def test_greedy_tokens_that_part_are_said_by_member_name_and_count() -> None:
    def generator(framework: str, agent: str) -> ExperimentMember:
        return ExperimentMember(
            evaluation_id=uuid.uuid4(),
            model="smollm2",
            model_version="1.1.0",
            framework=framework,
            framework_version="1",
            agent_id=agent,
            host="box",
        )

    members = [
        generator("onnxruntime", "onnx-agent"),
        generator("endpoint", "llama-server"),
        generator("endpoint", "vllm-server"),
    ]
    plan = PLAN.model_copy(update={"members": members})

    def done(member: ExperimentMember, tokens: list[int]) -> EvaluationCompleted:
        made = completed(member, 20.0)
        greedy = tokens_fingerprint(np.asarray([[1, 2, 3]]), tokens, "seeded prompt", "synthetic")
        return made.model_copy(
            update={"result": made.result.model_copy(update={"fingerprint": greedy})}
        )

    same = list(range(100, 116))
    parted = [*same[:6], 872, *same[7:]]
    state = fold(plan, done(members[0], same), done(members[1], parted), done(members[2], same))
    comparison = compare(state)
    assert comparison.parity_ok is False
    ours = next(p for p in comparison.parity if p.candidate == members[1].evaluation_id)
    assert (ours.reference_name, ours.candidate_name) == (
        "onnxruntime",
        "endpoint (llama-server)",
    )
    assert (ours.tokens_agreeing, ours.tokens_compared, ours.first_difference) == (15, 16, 7)
    console = Console(width=300, record=True)
    with patch("dlscope.cli.experiments.console", console):
        print_comparison("t", comparison)
    shown = console.export_text()
    assert "parity: onnxruntime vs endpoint (llama-server): 15 of 16 greedy tokens agree" in shown
    assert str(members[1].evaluation_id) not in shown, "members by name, never by UUID"
    assert "differs by" not in shown
    assert "cosine" not in shown
