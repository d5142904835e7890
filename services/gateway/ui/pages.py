"""The web pages: HTML rendered here from the same read models the /v1 API serves, with the
charts drawn in the browser from the specifications in ``charts``. Pages are plain links
and forms (keyboard-usable, no client-side routing); only the launch form needs a script.

    /                    latest evaluations and experiments
    /launch              the form: an evaluation or an experiment, followed live
    /evaluations[/{id}]  the list (filters, pages) and one evaluation
    /experiments[/{id}]  the list and one experiment
    /history             one model x framework x hardware over time
    /registry, /agents   manifests and their versions; the workers
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import HTMLResponse

from services.gateway.analysis import draw, history_of
from services.gateway.context import GatewayContext, context_of
from services.gateway.sweeps import SweepLoad, read_sweep
from services.gateway.ui import charts
from services.gateway.ui.documents import EvaluationDocument, ExperimentDocument, Source
from services.gateway.ui.launch import catalog as launch_catalog
from services.gateway.ui.listing import (
    BadQuery,
    Filters,
    evaluation_filters,
    experiment_filters,
    midnight,
    one_of,
    pages,
    paging,
)
from services.gateway.ui.rendering import embedded_chart, render
from services.gateway.ui.views import evaluation_info, experiment_info, sweep_charts
from shared.errors import DlscopeError
from shared.eventstore import ArtifactView
from shared.eventstore.views import (
    EVALUATION_STATUSES,
    EXPERIMENT_STATUSES,
    EvaluationView,
    ExperimentView,
)
from shared.messages import (
    DRIVERS,
    FRAMEWORKS,
    HARDWARE,
    SCENARIOS,
    FiguresReply,
    Scenario,
)
from shared.messages.tracing import DEFAULT_TRACE_LEVEL, TRACE_LEVELS

__all__ = ["page", "router"]

router = APIRouter(include_in_schema=False)

# A page's document (an evaluation's or an experiment's), and a list page's view.
D = TypeVar("D", EvaluationDocument, ExperimentDocument)
V = TypeVar("V")


def page(
    request: Request,
    template: str,
    *,
    title: str,
    section: str = "",
    status_code: int = status.HTTP_200_OK,
    messages: list[tuple[str, str]] | None = None,
    charts_on_page: bool = False,
    **context: Any,
) -> HTMLResponse:
    return HTMLResponse(
        render(
            template,
            title=title,
            section=section,
            messages=messages or [],
            charts_on_page=charts_on_page,
            chart=embedded_chart,
            page_name=template.removesuffix(".html"),
            **context,
        ),
        status_code=status_code,
    )


def _source(context: GatewayContext, notices: list[tuple[str, str]]) -> Source:
    """Documents whose figures come from the analyzer; if it cannot draw them, the page
    still shows everything else, and says why the charts are missing."""

    async def figures(ids: list[uuid.UUID]) -> FiguresReply:
        try:
            return await draw(context, ids)
        except DlscopeError as exc:
            notices.append(("warn", f"The charts are unavailable: {exc}"))
            return FiguresReply(unmeasured=ids)

    return Source(context.store, context.settings, figures)


@router.get("/", response_class=HTMLResponse)
async def home(request: Request) -> HTMLResponse:
    context = context_of(request)
    agents = await context.store.list_agents()
    return page(
        request,
        "home.html",
        title="Home",
        evaluations=await context.store.list_evaluations(limit=10),
        experiments=await context.store.list_experiments(limit=5),
        online=sum(a.status == "online" for a in agents),
        models=len({a.name for a in await context.store.list_artifacts(kind="model")}),
    )


@router.get("/evaluations/{evaluation_id}", response_class=HTMLResponse)
async def evaluation_page(request: Request, evaluation_id: uuid.UUID) -> HTMLResponse:
    return await _document_page(
        request, "evaluation", evaluation_id, Source.evaluation, evaluation_info
    )


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
async def experiment_page(request: Request, experiment_id: uuid.UUID) -> HTMLResponse:
    return await _document_page(
        request, "experiment", experiment_id, Source.experiment, experiment_info
    )


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
async def sweep_page(request: Request, sweep_id: uuid.UUID) -> HTMLResponse:
    sweep = await read_sweep(context_of(request).store, sweep_id)
    if sweep is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sweep {sweep_id} (yet)")
    counted = sweep.counted
    measured = [load for load in counted if load.output_tokens_per_s is not None]
    return page(
        request,
        "sweep.html",
        title=f"{sweep.model} on {sweep.framework} ({sweep.hardware}) across {sweep.unit}",
        section="/evaluations",
        charts_on_page=True,
        doc=sweep,
        best=max(measured, key=_tokens_per_s, default=None),
        bounds_said=", ".join(
            f"p{sweep.percentile * 100:g} {name.removesuffix('_ms').upper()} ≤ {bound:g} ms"
            for name, bound in sweep.bounds.items()
        ),
        charts=sweep_charts(sweep),
    )


@router.get("/evaluations", response_class=HTMLResponse)
async def evaluations_page(request: Request) -> HTMLResponse:
    store = context_of(request).store

    async def listed(filters: Filters, limit: int, offset: int) -> list[EvaluationView]:
        return await store.list_evaluations(
            limit=limit,
            offset=offset,
            status=filters.status,
            model=filters.model,
            framework=filters.framework,
            hardware=filters.hardware,
            since=midnight(filters.since),
            # "until" a day includes that day.
            until=midnight(None if filters.until is None else filters.until + timedelta(days=1)),
        )

    def row(view: EvaluationView) -> dict[str, Any]:
        return {"view": view, "summary": view.result, "headline": _headline(view.result)}

    return await _list_page(request, "evaluations", evaluation_filters, listed, row)


@router.get("/experiments", response_class=HTMLResponse)
async def experiments_page(request: Request) -> HTMLResponse:
    store = context_of(request).store

    async def listed(filters: Filters, limit: int, offset: int) -> list[ExperimentView]:
        return await store.list_experiments(
            limit=limit, offset=offset, status=filters.status, model=filters.model
        )

    def row(view: ExperimentView) -> dict[str, Any]:
        return {"view": view, "comparison": view.comparison}

    return await _list_page(request, "experiments", experiment_filters, listed, row)


@router.get("/launch", response_class=HTMLResponse)
async def launch_page(request: Request) -> HTMLResponse:
    context = context_of(request)
    artifacts = await context.store.list_artifacts(include_deprecated=True)
    agents = [a for a in await context.store.list_agents() if a.status == "online"]
    catalog = launch_catalog(artifacts)
    default_scenario = Scenario()
    online_frameworks = sorted({a.framework for a in agents if a.framework})
    models = catalog["models"]
    return page(
        request,
        "launch.html",
        title="Launch",
        section="/launch",
        catalog=catalog,
        default_model=next(iter(models), ""),
        online=len(agents),
        online_frameworks=online_frameworks,
        frameworks=FRAMEWORKS,
        hardware=sorted({a.hardware for a in agents if a.hardware} | {"cpu"}),
        scenarios=SCENARIOS,
        drivers=DRIVERS,
        defaults=default_scenario,
        trace_levels=TRACE_LEVELS,
        default_trace_level=DEFAULT_TRACE_LEVEL,
        token_required=bool(context.settings.api_token),
    )


@router.get("/registry", response_class=HTMLResponse)
async def registry_page(request: Request) -> HTMLResponse:
    artifacts: dict[str, list[ArtifactView]] = {}
    for view in await context_of(request).store.list_artifacts(include_deprecated=True):
        artifacts.setdefault(view.kind, []).append(view)
    return page(
        request, "registry.html", title="Registry", section="/registry", artifacts=artifacts
    )


@router.get("/agents", response_class=HTMLResponse)
async def agents_page(request: Request) -> HTMLResponse:
    agents = await context_of(request).store.list_agents()
    # Online first, then by name: the fleet that can take work is what one looks for.
    agents.sort(key=lambda a: (a.status != "online", a.agent_id))
    return page(
        request,
        "agents.html",
        title="Agents",
        section="/agents",
        agents=agents,
        online=sum(a.status == "online" for a in agents),
    )


@router.get("/history", response_class=HTMLResponse)
async def history_page(request: Request) -> HTMLResponse:
    context = context_of(request)
    query = request.query_params
    model_names = await _model_names(context)
    model = query.get("model") or None
    framework = query.get("framework") or "onnxruntime"
    hardware = query.get("hardware") or "cpu"
    selected = {"model": model, "framework": framework, "hardware": hardware}
    messages: list[tuple[str, str]] = []
    history = None
    code = status.HTTP_200_OK
    try:
        one_of(query, "framework", FRAMEWORKS)
        one_of(query, "hardware", HARDWARE)
    except BadQuery as exc:
        messages.append(("error", str(exc)))
        code = status.HTTP_422_UNPROCESSABLE_CONTENT
    else:
        if model is not None:
            history = await history_of(context, model, framework, hardware)
    return page(
        request,
        "history.html",
        title="History",
        section="/history",
        status_code=code,
        messages=messages,
        charts_on_page=bool(history and history.points),
        history=history,
        history_chart=None if history is None else charts.history(history),
        selected=selected,
        **_choices(model_names),
    )


# --- helpers --------------------------------------------------------------------------------


async def _document_page(
    request: Request,
    kind: str,
    key: uuid.UUID,
    read: Callable[[Source, uuid.UUID], Awaitable[D | None]],
    info: Callable[[D], dict[str, Any]],
) -> HTMLResponse:
    """The page of one evaluation or experiment (``kind``), its charts drawn by the analyzer
    where it can; 404 while the recorder has not stored it."""
    notices: list[tuple[str, str]] = []
    document = await read(_source(context_of(request), notices), key)
    if document is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {kind} {key} (yet)")
    return page(
        request,
        f"{kind}.html",
        title=document.title,
        section=f"/{kind}s",
        messages=notices,
        charts_on_page=True,
        doc=document,
        info=info(document),
    )


async def _list_page(
    request: Request,
    kind: str,
    filtered: Callable[[Mapping[str, str]], Filters],
    listed: Callable[[Filters, int, int], Awaitable[Sequence[V]]],
    row: Callable[[V], dict[str, Any]],
) -> HTMLResponse:
    """The list page of ``kind`` (evaluations, experiments): the views ``listed`` under the
    ``filtered`` query, a page of them, each shown as its ``row``; 422 for a bad filter."""
    query = request.query_params
    model_names = await _model_names(context_of(request))
    try:
        filters = filtered(query)
        limit, offset = paging(query)
    except BadQuery as exc:
        return _bad_filters(request, f"{kind}.html", str(exc), model_names)
    views = await listed(filters, limit + 1, offset)  # one more: whether a next page exists
    rows = [row(view) for view in views[:limit]]
    return page(
        request,
        f"{kind}.html",
        title=kind.capitalize(),
        section=f"/{kind}",
        rows=rows,
        filters=filters,
        page=pages(request, f"/{kind}", limit, offset, len(views) > limit, len(rows)),
        **_choices(model_names),
    )


def _tokens_per_s(load: SweepLoad) -> float:
    return load.output_tokens_per_s or 0.0


def _headline(summary: Any) -> Any:
    from services.gateway.ui.views import headline_of

    return headline_of(summary)


async def _model_names(context: GatewayContext) -> list[str]:
    return sorted({a.name for a in await context.store.list_artifacts(kind="model")})


def _choices(model_names: list[str]) -> dict[str, Any]:
    return {
        "model_names": model_names,
        "frameworks": FRAMEWORKS,
        "hardware": HARDWARE,
        "statuses": EVALUATION_STATUSES,
    }


def _bad_filters(
    request: Request, template: str, message: str, model_names: list[str]
) -> HTMLResponse:
    statuses = EXPERIMENT_STATUSES if template == "experiments.html" else EVALUATION_STATUSES
    return page(
        request,
        template,
        title="Bad filter",
        section="/" + template.removesuffix(".html"),
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        messages=[("error", message)],
        rows=[],
        filters=Filters(),
        page=pages(request, "/", 50, 0, False, 0),
        **{**_choices(model_names), "statuses": statuses},
    )
