"""/v1/experiments: one model evaluated on every matching system, and the comparison.

A request names one model (its exports for other frameworks join it, see
``shared.messages.lineage``) or lists the models; the gateway checks them with the registry,
publishes ``experiment.requested`` and answers 202. The scheduler plans the member
evaluations, the analyzer compares them; reads come from the ``experiments`` read model,
with each member's live status from the ``evaluations`` one.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Self

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from opentelemetry import trace
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from services.gateway.auth import UNAUTHORIZED, require_token
from services.gateway.context import GatewayContext, context_of, publish, resolve, status_path
from services.gateway.schemas import Limit, NotFound, Offset, Unreadable
from shared.errors import ModelNotFound
from shared.eventstore import EvaluationView, ExperimentStatus, ExperimentView
from shared.inputs import MAX_NAME
from shared.manifests import DatasetManifest, Manifest, ModelManifest, parse_constraint
from shared.messages import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    Envelope,
    ExperimentComparison,
    ExperimentGap,
    ExperimentRequested,
    FrameworkSelection,
    Hardware,
    ModelRef,
    ParityTolerance,
    Scenario,
    TraceLevel,
    experiment_models,
    experiment_stream,
)
from shared.messages.experiment import MAX_MEMBERS
from shared.telemetry import trace_id_hex

__all__ = ["router"]

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
Context = Annotated[GatewayContext, Depends(context_of)]


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=MAX_NAME, allow_inf_nan=False)

    model: str | None = Field(
        default=None,
        min_length=1,
        description="a model; its exports for the other frameworks join it (same version, "
        "tensors and attributes.training_dataset)",
        examples=["digits-cnn"],
    )
    models: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MEMBERS,
        description="instead of 'model': the models to compare, listed; the first is the reference",
    )
    version: str = Field(default="*", description="version constraint of the model(s)")
    frameworks: FrameworkSelection = Field(
        default="all", description="'all', or a list such as ['onnxruntime', 'pytorch']"
    )
    framework_version: str = Field(default="*", description="framework version constraint")
    hardware: Hardware = "cpu"
    scenario: Scenario = Field(default_factory=Scenario)
    dataset: str | None = Field(
        default=None, min_length=1, description="a labelled dataset: top-1 on it"
    )
    dataset_version: str = "*"
    split: str | None = None
    tolerance: ParityTolerance = Field(default_factory=ParityTolerance)
    timeout_s: float | None = Field(
        strict=True,
        default=None,
        gt=0,
        description="compare what has finished by then; default DLSCOPE_EVALUATION_TIMEOUT_S",
    )
    concurrent: bool = Field(
        strict=True,
        default=False,
        description="run the members together, without device leases (a contention study): "
        "each result is labelled measured_under_contention. By default members that share a "
        "device are measured one at a time",
    )
    trace_level: TraceLevel = Field(
        default=DEFAULT_TRACE_LEVEL,
        description="how deep each member is traced; framework and deeper profile each "
        "member's layers while it holds its device (GET /v1/evaluations/{id}/layers)",
    )
    trace_queries: int = Field(
        strict=True,
        default=DEFAULT_TRACE_QUERIES,
        ge=1,
        le=100,
        description="queries per traced pass",
    )

    @field_validator("version", "framework_version", "dataset_version")
    @classmethod
    def _constraint(cls, value: str) -> str:
        parse_constraint(value)
        return value

    @model_validator(mode="after")
    def _one_way_to_name_models(self) -> Self:
        if (self.model is None) == (self.models is None):
            raise ValueError("name the model with 'model', or list the models with 'models'")
        return self


class ExperimentAccepted(BaseModel):
    id: uuid.UUID
    models: list[ModelRef] = Field(description="what is compared; members follow once planned")
    trace_id: str
    trace_url: str | None = Field(description="the trace in Jaeger; null where none is exported")
    status_url: str


class MemberOut(BaseModel):
    evaluation_id: uuid.UUID
    model: str
    model_version: str
    framework: str
    framework_version: str
    agent_id: str
    host: str
    status: str = Field(description="the member evaluation's status")
    error: str | None


class ExperimentOut(BaseModel):
    id: uuid.UUID
    status: str = Field(description="requested | scheduled | compared | failed")
    model: str | None = Field(description="the reference model")
    models: list[ModelRef]
    frameworks: FrameworkSelection
    hardware: str | None
    trace_id: str
    trace_url: str | None = Field(description="the trace in Jaeger; null where none is exported")
    requested_at: datetime
    updated_at: datetime
    members: list[MemberOut] = Field(description="one evaluation per matching agent")
    skipped: list[ExperimentGap] = Field(description="what could not be scheduled, and why")
    comparison: ExperimentComparison | None = Field(description="once compared")
    error: str | None = Field(description="why the experiment failed, if it did")


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ExperimentAccepted,
    dependencies=[Depends(require_token)],
    responses={**UNAUTHORIZED, **Unreadable},
)
async def create_experiment(
    body: ExperimentCreate, request: Request, context: Context
) -> ExperimentAccepted:
    experiment_id = uuid.uuid4()
    if body.model is not None:
        model = await _model(context, experiment_id, body.model, body.version, ["model"])
        registered = await _registered_models(context)
        try:
            chosen = experiment_models(model, registered, body.frameworks)
        except ModelNotFound as exc:
            raise _unprocessable(["frameworks"], str(exc)) from exc
    else:
        assert body.models is not None, "checked by the body's validator"
        chosen = [
            await _model(context, experiment_id, name, body.version, ["models", i])
            for i, name in enumerate(body.models)
        ]
    if body.dataset is not None:
        found = await _resolve(
            context, experiment_id, "dataset", body.dataset, body.dataset_version
        )
        if not isinstance(found, DatasetManifest):
            raise _unprocessable(["dataset"], str(found))
    try:
        requested = ExperimentRequested(
            experiment_id=experiment_id,
            models=[ModelRef(model=m.name, version=f"=={m.version}") for m in chosen],
            frameworks=body.frameworks,
            framework_version=body.framework_version,
            hardware=body.hardware,
            scenario=body.scenario,
            dataset=body.dataset,
            dataset_version=body.dataset_version,
            split=body.split,
            tolerance=body.tolerance,
            timeout_s=body.timeout_s,
            concurrent=body.concurrent,
            trace_level=body.trace_level,
            trace_queries=body.trace_queries,
            requested_by="gateway",
        )
    except ValidationError as exc:  # e.g. a model listed twice
        raise _unprocessable(["models"], exc.errors()[0]["msg"]) from exc
    await publish(
        context,
        Envelope.wrap(
            requested, stream_id=experiment_stream(experiment_id), correlation_id=experiment_id
        ),
    )
    context.remember_accepted(experiment_id)
    trace_id = trace_id_hex(trace.get_current_span().get_span_context())
    return ExperimentAccepted(
        id=experiment_id,
        models=requested.models,
        trace_id=trace_id,
        trace_url=context.settings.trace_url(trace_id),
        status_url=status_path(request, "get_experiment", experiment_id=experiment_id),
    )


@router.get("", response_model=list[ExperimentOut])
async def list_experiments(
    context: Context,
    limit: Limit = 50,
    offset: Offset = 0,
    status_filter: Annotated[ExperimentStatus | None, Query(alias="status")] = None,
    model: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, description="the reference model")
    ] = None,
) -> list[ExperimentOut]:
    views = await context.store.list_experiments(
        limit=limit, offset=offset, status=status_filter, model=model
    )
    members = [key for view in views for key in view.member_ids]
    evaluations = await _evaluations(context, members)
    return [_out(view, evaluations, context) for view in views]


@router.get("/{experiment_id}", response_model=ExperimentOut, responses=NotFound)
async def get_experiment(experiment_id: uuid.UUID, context: Context) -> ExperimentOut:
    view = await context.stored(experiment_id, lambda: context.store.get_experiment(experiment_id))
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment {experiment_id} (yet)")
    evaluations = await _evaluations(context, view.member_ids)
    return _out(view, evaluations, context)


async def _model(
    context: GatewayContext,
    experiment_id: uuid.UUID,
    name: str,
    version: str,
    where: list[str | int],
) -> ModelManifest:
    found = await _resolve(context, experiment_id, "model", name, version)
    if not isinstance(found, ModelManifest):
        raise _unprocessable(where, str(found))
    return found


async def _resolve(
    context: GatewayContext, experiment_id: uuid.UUID, kind: str, name: str, version: str
) -> Manifest | str:
    """The manifest, or the registry's reason there is none."""
    found = await resolve(context, kind, name, version, correlation_id=experiment_id)
    return found.manifest or found.error or f"no {kind} {name!r} in the registry"


async def _registered_models(context: GatewayContext) -> list[ModelManifest]:
    views = await context.store.list_artifacts(kind="model")
    return [m for view in views if (m := view.model_manifest()) is not None]


async def _evaluations(
    context: GatewayContext, ids: list[uuid.UUID]
) -> dict[uuid.UUID, EvaluationView]:
    views = await context.store.get_evaluations(ids)
    return {view.evaluation_id: view for view in views}


def _out(
    view: ExperimentView, evaluations: dict[uuid.UUID, EvaluationView], context: GatewayContext
) -> ExperimentOut:
    request = view.request or {}
    members = []
    for member in view.members or ():
        evaluation = evaluations.get(member.evaluation_id)
        members.append(
            MemberOut(
                **member.model_dump(),
                status=evaluation.status if evaluation else "requested",
                error=evaluation.error if evaluation else None,
            )
        )
    return ExperimentOut(
        id=view.experiment_id,
        status=view.status,
        model=view.model,
        models=request.get("models", []),
        frameworks=request.get("frameworks", "all"),
        hardware=request.get("hardware"),
        trace_id=view.trace_id,
        trace_url=context.settings.trace_url(view.trace_id),
        requested_at=view.requested_at,
        updated_at=view.updated_at,
        members=members,
        skipped=list(view.skipped or ()),
        comparison=view.comparison,
        error=view.error,
    )


def _unprocessable(where: list[str | int], message: str) -> HTTPException:
    """422 in FastAPI's own shape, naming the field."""
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        [{"loc": ["body", *where], "msg": message, "type": "value_error"}],
    )
