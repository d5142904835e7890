"""``dlscope models``: the registry from the command line.

Without ``--gateway`` the commands work on the embedded registry (the SQLite store under
DLSCOPE_HOME, which ``dlscope run`` uses); with it, on a running deployment over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table

from dlscope.gateway_client import register_manifest
from dlscope.terminal import console, fail
from shared.config import Settings
from shared.errors import DlscopeError
from shared.manifests import Manifest, ModelManifest, load_manifest
from shared.messages import (
    DeprecateArtifact,
    DeprecationResult,
    RegisterArtifact,
    RegistrationResult,
)

__all__ = ["models"]

models = typer.Typer(
    help="The model registry: list, show, register, deprecate.", no_args_is_help=True
)

Gateway = Annotated[
    str | None,
    typer.Option(envvar="DLSCOPE_GATEWAY_URL", help="a running gateway; default: embedded"),
]
Token = Annotated[str | None, typer.Option(envvar="DLSCOPE_API_TOKEN")]


def _run(coroutine: Any) -> Any:
    import uvloop

    try:
        return uvloop.run(coroutine)
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc


def _settings() -> Settings:
    from dlscope.embedded import embedded_settings

    return embedded_settings(Settings())


def _http(gateway: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=gateway, headers=headers, timeout=30)


def _call(client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        return client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the gateway at {client.base_url}: {exc}", 2) from exc


def register_with(gateway: str, token: str | None, manifest: Manifest, what: str) -> bool:
    """Register ``manifest`` with the gateway, uploading the files of this host it names;
    whether it is new (False: this exact manifest was registered already)."""
    with _http(gateway, token) as client:
        try:
            response = register_manifest(client, manifest)
        except httpx.HTTPError as exc:
            raise fail(f"cannot reach the gateway at {client.base_url}: {exc}", 2) from exc
        except DlscopeError as exc:  # a file it names cannot be read here
            raise fail(f"{what}: {exc}", 2) from exc
    if response.status_code not in (200, 201):
        raise fail(f"{what}: refused ({response.status_code}): {_detail(response)}", 1)
    return bool(response.json()["created"])


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json()["detail"])
    except (ValueError, KeyError):
        return response.text


@models.command("list")
def list_models(
    gateway: Gateway = None,
    framework: Annotated[str | None, typer.Option(help="only models for this framework")] = None,
    task: Annotated[str | None, typer.Option(help="only models for this task")] = None,
    name: Annotated[str | None, typer.Option(help="only versions of this model")] = None,
    deprecated: Annotated[bool, typer.Option("--deprecated", help="include them")] = False,
    token: Token = None,
) -> None:
    """The registered models: the built-in zoo and what users registered."""
    if gateway:
        params = {
            "framework": framework,
            "task": task,
            "name": name,
            "include_deprecated": str(deprecated).lower(),
        }
        with _http(gateway, token) as client:
            response = _call(
                client,
                "GET",
                "/v1/models",
                params={k: v for k, v in params.items() if v is not None},
            )
        if response.status_code != 200:
            raise fail(f"the gateway answered {response.status_code}: {_detail(response)}", 1)
        rows = [
            (m["name"], m["version"], m["framework"], m["task"], m["deprecated"], m["description"])
            for m in response.json()
        ]
    else:
        from dlscope.embedded import list_models as embedded_list

        views = _run(
            embedded_list(
                _settings(),
                name=name,
                framework=framework,
                task=task,
                include_deprecated=deprecated,
            )
        )
        rows = [
            (
                v.name,
                v.version,
                v.framework,
                v.task,
                v.deprecated,
                str(v.manifest.get("description", "")),
            )
            for v in views
        ]
    table = Table(title="registered models")
    for column in ("name", "version", "framework", "task", "description"):
        table.add_column(column)
    for model, version, fw, model_task, is_deprecated, description in rows:
        table.add_row(
            model,
            version + (" (deprecated)" if is_deprecated else ""),
            fw or "",
            model_task or "",
            description,
        )
    console.print(table)


@models.command("register")
def register(
    file: Annotated[Path, typer.Argument(help="a model manifest (YAML); see docs/manifests.md")],
    gateway: Gateway = None,
    token: Token = None,
) -> None:
    """Register a model manifest. Versions are immutable: change means a new version."""
    try:
        manifest = load_manifest(file)
    except DlscopeError as exc:
        raise fail(str(exc), 2) from exc
    if not isinstance(manifest, ModelManifest):
        raise fail(f"{file}: a {manifest.kind} manifest; `models register` takes models", 2)
    if gateway:
        created = register_with(gateway, token, manifest, str(file))
    else:
        from dlscope.embedded import ask_registry

        body = manifest.model_dump(mode="json")  # relative sources now absolute
        # This user's own registry, in this process: the manifest may name their files.
        call = RegisterArtifact(manifest=body, local=True)
        reply = _run(ask_registry(_settings(), "register", call))
        result = reply.open(RegistrationResult)
        if result.manifest is None:
            raise fail(f"{file}: refused: {result.error}", 1)
        created = result.created
    state = "registered" if created else "already registered, unchanged"
    console.print(f"{manifest.ref}: {state}")


@models.command("deprecate")
def deprecate(
    name: str,
    version: str,
    reason: Annotated[str, typer.Option(help="why; shown to users")],
    gateway: Gateway = None,
    token: Token = None,
) -> None:
    """Deprecate a version: constraints stop choosing it; an exact pin still does."""
    if gateway:
        with _http(gateway, token) as client:
            response = _call(
                client, "POST", f"/v1/models/{name}/{version}/deprecate", json={"reason": reason}
            )
        if response.status_code != 204:
            raise fail(f"refused ({response.status_code}): {_detail(response)}", 1)
    else:
        from dlscope.embedded import ask_registry

        call = DeprecateArtifact(name=name, version=version, reason=reason)
        error = _run(ask_registry(_settings(), "deprecate", call)).open(DeprecationResult).error
        if error is not None:
            raise fail(error, 1)
    console.print(f"{name}@{version}: deprecated")
