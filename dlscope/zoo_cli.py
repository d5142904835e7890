"""``dlscope zoo``: build the built-in zoo's trained models here, then register them.

Building needs no network: the data ship with scikit-learn and training takes seconds.
Building again gives the same files, so registering again is a no-op ("already
registered"). Without ``--gateway`` the models go to the embedded registry under
DLSCOPE_HOME; with it, to a running deployment over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlscope.models_cli import Gateway, Token, _run, _settings, register_with
from dlscope.terminal import console, fail
from shared.config import Settings
from shared.errors import DlscopeError
from shared.manifests import ModelManifest
from shared.messages import RegisterArtifact, RegistrationResult

__all__ = ["ZOO_MODELS", "build_on_first_use", "build_zoo", "zoo"]

zoo = typer.Typer(help="The built-in zoo's trained models, built locally.", no_args_is_help=True)


def _register(manifest: ModelManifest, gateway: str | None, token: str | None) -> bool:
    """Register one manifest; whether it is new (False: the same was registered already)."""
    if gateway:
        return register_with(gateway, token, manifest, manifest.ref)
    from dlscope.embedded import ask_registry

    body = manifest.model_dump(mode="json")  # relative sources now absolute
    call = RegisterArtifact(manifest=body, local=True)  # this user's own, in-process registry
    reply = _run(ask_registry(_settings(), "register", call))
    result = reply.open(RegistrationResult)
    if result.manifest is None:
        raise fail(f"{manifest.ref}: refused: {result.error}", 1)
    return bool(result.created)


# The models `dlscope zoo build` makes; `dlscope run` builds them on first use.
ZOO_MODELS = ("digits-cnn", "digits-cnn-torch", "digits-cnn-tf")


def build_zoo(out_dir: Path, gateway: str | None = None, token: str | None = None) -> None:
    """Train digits-cnn (ONNX, TorchScript and SavedModel) into ``out_dir`` and register it."""
    # torch takes seconds to import: only building pays for it.
    try:
        from dlscope.zoo import build_digits
    except ImportError as exc:
        raise fail(
            f"building the zoo trains with PyTorch and exports to ONNX Runtime and TensorFlow, "
            f"and {exc.name or exc} is not installed here: pip install 'dlscope[zoo]'",
            1,
        ) from exc

    with console.status("training digits-cnn on the digits train split…"):
        try:
            built = build_digits(out_dir)
        except DlscopeError as exc:
            raise fail(str(exc), 1) from exc
    for model in built:
        manifest = model.manifest
        state = "registered" if _register(manifest, gateway, token) else "already registered"
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): top-1 {model.top1:.2%}, "
            f"top-5 {model.top5:.2%} on {manifest.attributes['accuracy']['dataset']}; "
            f"{model.path}: {state}",
            soft_wrap=True,
            highlight=False,
        )


def build_on_first_use(model: str, home: Path) -> None:
    """Build the zoo into ``home`` when ``model`` is one of its models not built there yet."""
    if model in ZOO_MODELS and not (home / "zoo" / f"{model}.yaml").exists():
        console.print(f"{model} is not built here yet: building the zoo first (no download)")
        build_zoo(home / "zoo")


@zoo.command("build")
def build(
    out: Annotated[
        Path | None, typer.Option(help="where to write the models; default: DLSCOPE_HOME/zoo")
    ] = None,
    gateway: Gateway = None,
    token: Token = None,
) -> None:
    """Train digits-cnn (ONNX, TorchScript and SavedModel), write its manifests, register them."""
    build_zoo(out if out is not None else Settings().home / "zoo", gateway, token)
