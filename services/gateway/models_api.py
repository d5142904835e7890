"""/v1/models: the registry's manifests. Reads come from the ``artifacts`` read model;
registration and deprecation are asked of the registry, which publishes the events."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import orjson
import yaml
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from services.gateway.auth import UNAUTHORIZED, require_token
from services.gateway.context import GatewayContext, ask_registry, context_of
from services.gateway.schemas import NotFound, Unreadable
from shared.eventstore import ArtifactView
from shared.manifests import read_yaml
from shared.messages import (
    DeprecateArtifact,
    DeprecationResult,
    RegisterArtifact,
    RegistrationResult,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/models", tags=["models"])
Context = Annotated[GatewayContext, Depends(context_of)]

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


class ModelOut(BaseModel):
    name: str
    version: str
    framework: str | None
    task: str | None
    description: str
    deprecated: bool
    deprecation_reason: str | None
    digest: str = Field(description="sha256 of the manifest's canonical JSON")
    registered_at: datetime


class ModelDetail(ModelOut):
    manifest: dict[str, Any]


class Registered(BaseModel):
    created: bool = Field(description="false when this exact manifest was registered already")
    manifest: dict[str, Any]


class Deprecation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1)


def _out(view: ArtifactView) -> ModelOut:
    return ModelOut(
        name=view.name,
        version=view.version,
        framework=view.framework,
        task=view.task,
        description=str(view.manifest.get("description", "")),
        deprecated=view.deprecated,
        deprecation_reason=view.deprecation_reason,
        digest=view.digest,
        registered_at=view.registered_at,
    )


@router.get("", response_model=list[ModelOut])
async def list_models(
    context: Context,
    framework: str | None = None,
    task: str | None = None,
    name: str | None = None,
    include_deprecated: Annotated[bool, Query()] = False,
) -> list[ModelOut]:
    views = await context.store.list_artifacts(
        kind="model",
        name=name,
        framework=framework,
        task=task,
        include_deprecated=include_deprecated,
    )
    return [_out(v) for v in views]


@router.get("/{name}", response_model=list[ModelOut], responses=NotFound)
async def model_versions(name: str, context: Context) -> list[ModelOut]:
    views = await context.store.list_artifacts(kind="model", name=name, include_deprecated=True)
    if not views:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no model {name!r} is registered")
    return [_out(v) for v in views]


@router.get("/{name}/{version}", response_model=ModelDetail, responses=NotFound)
async def model_version(name: str, version: str, context: Context) -> ModelDetail:
    views = await context.store.list_artifacts(kind="model", name=name, include_deprecated=True)
    for view in views:
        if view.version == version:
            return ModelDetail(**_out(view).model_dump(), manifest=view.manifest)
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"{name}@{version} is not registered")


@router.post(
    "",
    response_model=Registered,
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(require_token)],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                t: {"schema": {"type": "object"}} for t in ("application/json", *YAML_TYPES)
            },
        }
    },
    responses={
        200: {"description": "this exact manifest was registered already"},
        409: {"description": "the version exists with other content"},
        415: {"description": "a body neither JSON nor YAML"},
        422: {"description": "a manifest that cannot be parsed or does not validate"},
        **UNAUTHORIZED,
    },
)
async def register_model(request: Request, response: Response, context: Context) -> Registered:
    """Register a model manifest, sent as JSON or YAML (see docs/manifests.md)."""
    submitted = _parse_manifest(request.headers.get("content-type", ""), await request.body())
    reply = await ask_registry(context, "register", RegisterArtifact(manifest=submitted))
    result = reply.open(RegistrationResult)
    if result.conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, result.error)
    if result.manifest is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, result.error)
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return Registered(created=result.created, manifest=result.manifest.model_dump(mode="json"))


@router.post(
    "/{name}/{version}/deprecate",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[Depends(require_token)],
    responses={**NotFound, **UNAUTHORIZED, **Unreadable},
)
async def deprecate_model(name: str, version: str, body: Deprecation, context: Context) -> None:
    """Deprecate a version: constraints stop choosing it; an exact pin still does."""
    reply = await ask_registry(
        context, "deprecate", DeprecateArtifact(name=name, version=version, reason=body.reason)
    )
    error = reply.open(DeprecationResult).error
    if error is not None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, error)


def _parse_manifest(content_type: str, body: bytes) -> dict[str, Any]:
    media = content_type.split(";")[0].strip().lower()
    try:
        if media in YAML_TYPES:
            data = read_yaml(body)
        elif media in ("application/json", ""):
            data = orjson.loads(body)
        else:
            raise HTTPException(
                status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                f"send the manifest as application/json or application/yaml, not {media!r}",
            )
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"the manifest cannot be parsed: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "a manifest must be a mapping (an object)"
        )
    return data
