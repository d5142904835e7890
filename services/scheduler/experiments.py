"""Planning an experiment: which member evaluations run where, and what cannot run.

A pure decision: the request, the models it lists as the registry resolved them, and the
agents online now give either the plan (``experiment.scheduled``: one member per model and
matching online agent) or the reason nothing can run (``experiment.failed``). Member ids are
derived from ``seed`` (the request's event id), so planning a redelivered request again gives
the same evaluations; ``member_evaluations`` are the requests the plan's members run as.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from services.scheduler.agents import AgentEntry, no_worker_reason
from shared.manifests import ModelManifest, matches
from shared.messages import (
    EvaluationRequested,
    ExperimentFailed,
    ExperimentGap,
    ExperimentMember,
    ExperimentRequested,
    ExperimentScheduled,
    ModelRef,
)

__all__ = ["Resolved", "member_evaluations", "plan_experiment"]

# A model as the registry resolved it, or the reason it could not.
Resolved = tuple[ModelRef, ModelManifest | str]


def plan_experiment(
    request: ExperimentRequested,
    models: Sequence[Resolved],
    online: Sequence[AgentEntry],
    *,
    seed: uuid.UUID,
    deadline_s: float,
) -> ExperimentScheduled | ExperimentFailed:
    members: list[ExperimentMember] = []
    skipped: list[ExperimentGap] = []
    covered: set[str] = set()
    for ref, manifest in models:
        if isinstance(manifest, str):
            skipped.append(ExperimentGap(model=ref.model, reason=manifest))
            continue
        # Its own framework's agents, and those of frameworks that run its format (an ONNX
        # graph also runs on opencl and tensorrt workers): one member per agent.
        # Asked for "all", those others only where one of their workers is online.
        serving = {a.framework for a in online if a.unavailable is None}
        frameworks = [
            f
            for f in manifest.frameworks
            if f in request.frameworks
            or (request.frameworks == "all" and (f == manifest.framework.name or f in serving))
        ]
        covered.update(manifest.frameworks)
        for framework in frameworks:
            agents = [a for a in online if _can_run(a, framework, request, manifest)]
            if not agents:
                skipped.append(
                    ExperimentGap(
                        model=manifest.name,
                        framework=framework,
                        reason=no_worker_reason(
                            framework,
                            request.framework_version,
                            request.hardware,
                            list(online),
                            model_needs=manifest.version_needed_by(framework),
                        ),
                    )
                )
            members += [
                ExperimentMember(
                    evaluation_id=uuid.uuid5(seed, f"{manifest.ref}/{agent.agent_id}"),
                    model=manifest.name,
                    model_version=manifest.version,
                    framework=framework,
                    framework_version=agent.framework_version,
                    agent_id=agent.agent_id,
                    host=agent.host,
                )
                for agent in agents
            ]
    if request.frameworks != "all":
        names = ", ".join(ref.model for ref, _ in models)
        skipped += [
            ExperimentGap(framework=f, reason=f"none of the models ({names}) is for {f}")
            for f in request.frameworks
            if f not in covered
        ]
    if not members:
        return ExperimentFailed(
            experiment_id=request.experiment_id,
            reason="nothing to run: " + "; ".join(_describe(gap) for gap in skipped),
        )
    return ExperimentScheduled(
        experiment_id=request.experiment_id,
        members=members,
        skipped=skipped,
        tolerance=request.tolerance,
        deadline_s=deadline_s,
    )


def member_evaluations(
    request: ExperimentRequested, plan: ExperimentScheduled
) -> list[EvaluationRequested]:
    """The evaluation requests of ``plan``'s members, each pinned to its agent and to the
    model version it was planned with."""
    return [
        EvaluationRequested(
            evaluation_id=member.evaluation_id,
            model=member.model,
            model_version=f"=={member.model_version}",  # the version planned with
            framework=member.framework,
            framework_version=request.framework_version,
            hardware=request.hardware,
            agent_id=member.agent_id,
            scenario=request.scenario,
            dataset=request.dataset,
            dataset_version=request.dataset_version,
            split=request.split,
            requested_by=f"experiment {request.experiment_id}",
            experiment_id=request.experiment_id,
            trace_level=request.trace_level,
            trace_queries=request.trace_queries,
            concurrent=request.concurrent,
        )
        for member in plan.members
    ]


def _can_run(
    agent: AgentEntry, framework: str, request: ExperimentRequested, manifest: ModelManifest
) -> bool:
    return (
        agent.unavailable is None
        and agent.framework == framework
        and agent.hardware == request.hardware
        and matches(agent.framework_version, request.framework_version)
        and matches(agent.framework_version, manifest.version_needed_by(framework))
    )


def _describe(gap: ExperimentGap) -> str:
    subject = gap.model or gap.framework
    return f"{subject}: {gap.reason}" if subject else gap.reason
