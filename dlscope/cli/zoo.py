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

from dlscope.cli.client import Client, client_for
from dlscope.cli.models import Gateway, Token
from dlscope.cli.terminal import console, fail
from shared.config import Settings
from shared.errors import DlscopeError

__all__ = ["ZOO_MODELS", "build_on_first_use", "build_zoo", "zoo"]

zoo = typer.Typer(help="The built-in zoo's trained models, built locally.", no_args_is_help=True)


# The models `dlscope zoo build` makes; `dlscope run` builds them on first use.
ZOO_MODELS = ("digits-cnn", "digits-cnn-torch", "digits-cnn-tf")


def build_zoo(out_dir: Path, client: Client) -> None:
    """Train digits-cnn (ONNX, TorchScript and SavedModel) into ``out_dir``; register it with
    ``client``."""
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
        new = client.register(manifest, manifest.ref)
        state = "registered" if new else "already registered"
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): top-1 {model.top1:.2%}, "
            f"top-5 {model.top5:.2%} on {manifest.attributes['accuracy']['dataset']}; "
            f"{model.path}: {state}",
            soft_wrap=True,
            highlight=False,
        )


def build_on_first_use(model: str, home: Path, client: Client) -> None:
    """Build the zoo into ``home`` when ``model`` is one of its models not built there yet."""
    if model in ZOO_MODELS and not (home / "zoo" / f"{model}.yaml").exists():
        console.print(f"{model} is not built here yet: building the zoo first (no download)")
        build_zoo(home / "zoo", client)


@zoo.command("build")
def build(
    out: Annotated[
        Path | None, typer.Option(help="where to write the models; default: DLSCOPE_HOME/zoo")
    ] = None,
    gateway: Gateway = None,
    token: Token = None,
) -> None:
    """Train digits-cnn (ONNX, TorchScript and SavedModel), write its manifests, register them."""
    build_zoo(out if out is not None else Settings().home / "zoo", client_for(gateway, token))
