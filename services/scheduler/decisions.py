"""What the scheduler decides for one evaluation request, as pure functions of what it knows.

``checked_model`` and ``checked_dataset`` check the request against the model and the dataset
the registry resolved (or its reason there is none); ``dispatch`` picks the agents that can
run it, ships its files to them and writes the scheduled event and the job, or says why no
agent can have it. None does any I/O: the service asks the registry, waits out the discovery
window and publishes what they decide (``SchedulerService._schedule``); the tests give them
tables of inputs and answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.agents import AgentDirectory
from services.scheduler.artifacts import ship
from shared.errors import ConfigurationError
from shared.manifests import DatasetManifest, Manifest, ModelManifest
from shared.measurement import check_sample_count
from shared.messages import (
    EvaluationRequested,
    EvaluationScheduled,
    FailureStage,
    RunEvaluation,
    job_key,
)

__all__ = ["Dispatch", "Refusal", "checked_dataset", "checked_model", "dispatch"]


@dataclass(frozen=True)
class Refusal:
    """The request fails: at which stage, and why, in words for the user."""

    stage: FailureStage
    reason: str


@dataclass(frozen=True)
class Dispatch:
    """The request is scheduled: the event that says so and the job, with its routing key
    (an agent's own queue, or the shared queue of its framework and hardware)."""

    scheduled: EvaluationScheduled
    job: RunEvaluation
    routing_key: str


def checked_model(request: EvaluationRequested, model: Manifest | str) -> ModelManifest | Refusal:
    """The model the registry resolved for ``request`` (or its reason there is none), if the
    request can run it."""
    if not isinstance(model, ModelManifest):
        return Refusal("validation", _missing(model, "model", request.model))
    if not model.runs_on(request.framework):
        return Refusal(
            "validation",
            f"model {model.ref} is for {model.framework.name}; "
            f"it cannot run on {request.framework}",
        )
    return model


def checked_dataset(
    request: EvaluationRequested, dataset: Manifest | str
) -> DatasetManifest | Refusal:
    """The dataset the registry resolved for ``request`` (or its reason there is none), if it
    has the split asked for and enough samples for the scenario."""
    if not isinstance(dataset, DatasetManifest):
        return Refusal("validation", _missing(dataset, "dataset", str(request.dataset)))
    if request.split is not None and request.split not in dataset.splits:
        splits = ", ".join(dataset.splits) or "none"
        return Refusal(
            "validation",
            f"dataset {dataset.ref} has no split {request.split!r}; splits: {splits}",
        )
    try:  # a multi-stream query cannot draw more distinct samples than there are
        check_sample_count(request.scenario.measurement(), dataset.sample_count(request.split))
    except ConfigurationError as exc:
        return Refusal("validation", f"dataset {dataset.ref}: {exc}")
    return dataset


def _missing(found: Manifest | str, kind: str, name: str) -> str:
    if isinstance(found, str):
        return found
    return f"{name!r} is a {found.kind}, not a {kind}"


def dispatch(
    request: EvaluationRequested,
    model: ModelManifest,
    dataset: DatasetManifest | None,
    agents: AgentDirectory,
    now: float,
    *,
    artifact_url: str | None,
    here: str,
) -> Dispatch | Refusal:
    """The job for ``request`` on the agents online at ``now`` that can run it, with its files
    named as those agents reach them (``artifact_url``: this deployment's artifact server, if
    it serves them; ``here``: this host), or why no agent can have it."""
    needs = model.version_needed_by(request.framework)
    candidates = agents.candidates(request, now, model_needs=needs)
    if not candidates:
        return Refusal("scheduling", agents.explain_no_match(request, now, model_needs=needs))
    # Where the candidates run decides how the job names the model's files (artifacts.py).
    shipment = ship(model, dataset, candidates, artifact_url=artifact_url, here=here)
    if isinstance(shipment, str):
        return Refusal("artifact", shipment)
    agent_id = agents.route(request, shipment.candidates, now)
    scheduled = EvaluationScheduled(
        evaluation_id=request.evaluation_id,
        model=model.name,
        model_version=model.version,
        framework=request.framework,
        hardware=request.hardware,
        agent_id=agent_id,
        candidates=[a.agent_id for a in shipment.candidates],
        experiment_id=request.experiment_id,
    )
    job = RunEvaluation(
        evaluation_id=request.evaluation_id,
        manifest=shipment.manifest,
        framework=request.framework,
        framework_version=request.framework_version,
        hardware=request.hardware,
        scenario=request.scenario,
        dataset=shipment.dataset,
        split=request.split,
        experiment_id=request.experiment_id,
        trace_level=request.trace_level,
        trace_queries=request.trace_queries,
        concurrent=request.concurrent,
    )
    # Unpinned jobs go to the shared queue of the framework and hardware, where the first
    # free worker takes them; pinned ones (by the request, or because not every worker on
    # the shared queue can run the job) to that agent's own queue.
    return Dispatch(scheduled, job, job_key(request.framework, request.hardware, agent_id))
