"""``dlscope models``: the registry from the command line.

Without ``--gateway`` the commands work on the embedded registry (the SQLite store under
DLSCOPE_HOME, which ``dlscope run`` uses); with it, on a running deployment over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.client import ModelFilter, ModelRow
from dlscope.cli.fitting import Column, Fitted
from dlscope.cli.gateway_options import Gateway, Token
from dlscope.cli.target import client_for
from dlscope.cli.terminal import console, fail
from dlscope.cli.zoo_build import BUILT_ON_FIRST_USE, ZOO_KINDS, not_built
from shared.config import Settings
from shared.errors import DlscopeError
from shared.manifests import ModelManifest, load_manifest

__all__ = ["models"]

models = typer.Typer(help="The model registry: list, register, deprecate.", no_args_is_help=True)


@models.command("list")
def list_models(
    gateway: Gateway = None,
    framework: Annotated[str | None, typer.Option(help="only models for this framework")] = None,
    task: Annotated[str | None, typer.Option(help="only models for this task")] = None,
    name: Annotated[str | None, typer.Option(help="only versions of this model")] = None,
    deprecated: Annotated[bool, typer.Option("--deprecated", help="include them")] = False,
    token: Token = None,
) -> None:
    """The registered models: the built-in zoo and what users registered; here (without
    --gateway), also the zoo's trained models not built yet, which `dlscope run` builds on
    first use."""
    wanted = ModelFilter(name=name, framework=framework, task=task, include_deprecated=deprecated)
    rows = client_for(gateway, token).models(wanted)
    if gateway is None:
        rows += _not_built(wanted, {row.name for row in rows})
    # A table where it fits, else a block a model: a name is what the user types next, never cut.
    console.print(
        Fitted(
            title="registered models",
            columns=[Column(c) for c in ("name", "version", "framework", "task", "description")],
            rows=[  # a manifest's words as written: never rich markup (Fitted's cells are Text)
                (
                    row.name,
                    row.version + (" (deprecated)" if row.deprecated else ""),
                    row.framework or "",
                    row.task or "",
                    row.description,
                )
                for row in rows
            ],
            names=[f"{row.name} {row.version}" for row in rows],
            named=2,
        )
    )


def _not_built(wanted: ModelFilter, listed: set[str]) -> list[ModelRow]:
    """The zoo's models not built here yet that ``wanted`` matches, as rows of the list."""
    return [
        ModelRow(model, "-", framework, task, False, f"{BUILT_ON_FIRST_USE} (dlscope run {model})")
        for model in not_built(Settings().home)
        for framework, task in [ZOO_KINDS[model]]
        if model not in listed
        and wanted.name in (None, model)
        and wanted.framework in (None, framework)
        and wanted.task in (None, task)
    ]


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
    created = client_for(gateway, token).register(manifest, str(file))
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
    client_for(gateway, token).deprecate(name, version, reason)
    console.print(f"{name}@{version}: deprecated")
