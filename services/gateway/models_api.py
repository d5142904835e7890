"""/v1/models: the registry's manifests. Reads come from the ``artifacts`` read model;
registration and deprecation are asked of the registry, which publishes the events.

A registration is a manifest alone (JSON or YAML), or ``multipart/form-data`` with the
manifest (part ``manifest``) and the files it names by relative paths (parts ``file``, as
many as it has: each is matched to its source by sha256). The registry decides what a
manifest may name (``shared.artifacts.policy``)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

import orjson
import yaml
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from services.gateway.auth import UNAUTHORIZED, require_token
from services.gateway.context import GatewayContext, ask_registry, context_of
from services.gateway.schemas import NotFound, Unreadable
from shared.eventstore import ArtifactView
from shared.inputs import MAX_DESCRIPTION, MAX_ITEMS, MAX_NAME, unsafe_text
from shared.manifests import read_yaml
from shared.messages import (
    DeprecateArtifact,
    DeprecationResult,
    RegisterArtifact,
    RegistrationResult,
    UploadedFile,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/models", tags=["models"])
Context = Annotated[GatewayContext, Depends(context_of)]

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
MULTIPART = "multipart/form-data"


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

    reason: str = Field(min_length=1, max_length=MAX_DESCRIPTION)


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
    framework: Annotated[str | None, Query(max_length=MAX_NAME)] = None,
    task: Annotated[str | None, Query(max_length=MAX_NAME)] = None,
    name: Annotated[str | None, Query(max_length=MAX_NAME)] = None,
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
                **{t: {"schema": {"type": "object"}} for t in ("application/json", *YAML_TYPES)},
                MULTIPART: {
                    "schema": {
                        "type": "object",
                        "required": ["manifest"],
                        "properties": {
                            "manifest": {"type": "string", "description": "JSON or YAML"},
                            "file": {
                                "type": "array",
                                "items": {"type": "string", "format": "binary"},
                                "description": "the files its relative sources name",
                            },
                        },
                    }
                },
            },
        }
    },
    responses={
        200: {"description": "this exact manifest was registered already"},
        409: {"description": "the version exists with other content"},
        413: {
            "description": "over DLSCOPE_MAX_BODY_BYTES, or the files over DLSCOPE_MAX_UPLOAD_BYTES"
        },
        415: {"description": "a body neither JSON, YAML nor multipart/form-data"},
        422: {"description": "a manifest that cannot be parsed or does not validate"},
        **UNAUTHORIZED,
    },
)
async def register_model(request: Request, response: Response, context: Context) -> Registered:
    """Register a model manifest, sent as JSON or YAML, or as multipart/form-data with the
    files it names (see docs/manifests.md)."""
    content_type = request.headers.get("content-type", "")
    files: list[UploadedFile] = []
    if _media(content_type) == MULTIPART:
        submitted, files = await _parse_upload(request, context)
    else:
        submitted = await _parsed_manifest(content_type, await request.body(), context)
    result = await ask_registry(
        context,
        "register",
        RegisterArtifact(manifest=submitted, files=files),
        RegistrationResult,
        max_bytes=context.settings.upload_message_bytes,
    )
    if result.conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, result.error)
    if result.manifest is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, result.error)
    # Whoever asks next for the newest version of it gets this one, not what was kept.
    context.resolutions.forget(result.manifest.kind, result.manifest.name)
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
        context,
        "deprecate",
        DeprecateArtifact(name=name, version=version, reason=body.reason),
        DeprecationResult,
    )
    context.resolutions.forget("model", name)  # constraints stop choosing it from now on
    if reply.error is not None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, reply.error)


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


async def _parse_upload(
    request: Request, context: GatewayContext
) -> tuple[dict[str, Any], list[UploadedFile]]:
    """The manifest part and the file parts of a multipart registration."""
    limit = context.settings.max_body_bytes
    # The body as a whole is bounded already (guards); the form parser bounds its parts.
    async with request.form(
        max_files=MAX_ITEMS, max_fields=MAX_ITEMS, max_part_size=limit
    ) as form:  # closes the parts' temporary files, whatever happens
        submitted = await _manifest_part(form.get("manifest"), context)
        files: list[UploadedFile] = []
        for key, part in form.multi_items():
            if key != "manifest":
                files.append(await _file_part(key, part))
        return submitted, files


async def _manifest_part(part: UploadFile | str | None, context: GatewayContext) -> dict[str, Any]:
    limit = context.settings.max_body_bytes
    if part is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "a multipart registration needs a part named 'manifest' (JSON or YAML)",
        )
    if isinstance(part, UploadFile):
        text, media = await part.read(limit + 1), part.content_type or ""
    else:
        text, media = part.encode(), ""
    if len(text) > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the manifest part is over {limit} bytes (DLSCOPE_MAX_BODY_BYTES)",
        )
    if _media(media) not in (*YAML_TYPES, "application/json"):
        media = "application/yaml"  # YAML reads JSON too
    return await _parsed_manifest(media, text, context)


async def _parsed_manifest(
    content_type: str, body: bytes, context: GatewayContext
) -> dict[str, Any]:
    """Parsed off the event loop: a manifest near the node bound takes seconds to read, and the
    gateway's other requests (health checks included) must not wait behind it."""
    return await asyncio.to_thread(_parse_manifest, content_type, body, context)


async def _file_part(key: str, part: UploadFile | str) -> UploadedFile:
    if key != "file" or not isinstance(part, UploadFile):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"unexpected part {key[:MAX_NAME]!r}: send the manifest as 'manifest' and each "
            "file it names as 'file'",
        )
    name = part.filename or "artifact"
    if len(name) > MAX_NAME or unsafe_text(name) is not None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"a file part's name must be text of at most {MAX_NAME} characters",
        )
    return UploadedFile(name=name, content=await part.read())


def _parse_manifest(content_type: str, body: bytes, context: GatewayContext) -> dict[str, Any]:
    media = _media(content_type)
    try:
        if media in YAML_TYPES:
            data = read_yaml(body, max_nodes=context.settings.max_manifest_nodes)
        elif media in ("application/json", ""):
            data = orjson.loads(body)
        else:
            raise HTTPException(
                status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                "send the manifest as application/json or application/yaml, or with its files "
                f"as multipart/form-data, not {media[:MAX_NAME]!r}",
            )
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"the manifest cannot be parsed: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "a manifest must be a mapping (an object)"
        )
    problem = unsafe_text(data)
    if problem is not None:
        where = ".".join(str(p) for p in problem[0])
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"manifest: {where}: the text holds {problem[1]}"
        )
    return data
