"""A trained torch ``nn.Sequential`` as a TensorFlow SavedModel with the same weights.

No converter is involved (tf2onnx and onnx-tf do not follow Keras 3 and TF 2.21): the few
layer types the zoo's CNNs use are written again in ``tf.nn`` operations, the weights are
copied across, and the export is checked against torch before it is kept.

The SavedModel keeps torch's NCHW interface, so every framework is fed by the same
pre-processing steps of one manifest: it transposes to NHWC inside, where TensorFlow's CPU
kernels are, and back to NCHW before flattening so the linear layer sees torch's order.

A SavedModel is a folder; the zoo ships it as one tar file, written with fixed metadata.
``tf.saved_model.save`` is not deterministic (function names in ``saved_model.pb`` differ from
one save to the next), so, as with TorchScript, an existing archive is kept when it holds the
same variables and computes the same outputs.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from shared.config import quiet_framework_logs
from shared.errors import ArtifactError

__all__ = ["SIGNATURE", "export_savedmodel", "run_savedmodel", "tensorflow_version"]

SIGNATURE = "serving_default"


def tensorflow() -> Any:
    # TensorFlow logs its CPU-feature banner on import at INFO level: noise for a user.
    quiet_framework_logs()
    if "tensorflow" not in sys.modules:
        with _banner_kept_back():
            import tensorflow  # noqa: F401
    import tensorflow as tf

    return tf


@contextlib.contextmanager
def _banner_kept_back() -> Iterator[None]:
    """What the block writes to the process's standard error (file descriptor 2) kept back,
    and shown only when the block fails. TensorFlow 2.21 logs through absl's C++ logging on
    import ("All log messages before absl::InitializeLog() ...", oneDNN's banner), which
    TF_CPP_MIN_LOG_LEVEL no longer silences."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            kept.seek(0)
            os.write(2, kept.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def tensorflow_version() -> str:
    return str(tensorflow().__version__)


def _layers(model: nn.Module) -> tuple[Callable[[Any], Any], list[Any]]:
    """A function of a NCHW TensorFlow tensor computing what ``model`` does on it, and the
    variables holding ``model``'s weights."""
    if not isinstance(model, nn.Sequential):
        raise ArtifactError(f"only nn.Sequential models export, not {type(model).__name__}")
    tf = tensorflow()
    steps: list[Callable[[Any], Any]] = []
    variables: list[Any] = []
    for index, layer in enumerate(model):
        if isinstance(layer, nn.Conv2d):
            if (
                layer.groups != 1
                or layer.dilation != (1, 1)
                or isinstance(layer.padding, str)
                or layer.bias is None
            ):
                raise ArtifactError(
                    f"layer {index}: only convolutions with a bias and without groups, "
                    "dilation or named padding export"
                )
            # torch's OIHW kernel is HWIO in TensorFlow; torch pads height and width alike on
            # both sides, which TensorFlow takes as explicit NHWC padding.
            kernel = tf.Variable(
                layer.weight.detach().numpy().transpose(2, 3, 1, 0), name=f"conv{index}_kernel"
            )
            bias = tf.Variable(layer.bias.detach().numpy(), name=f"conv{index}_bias")
            variables += [kernel, bias]
            (ph, pw) = layer.padding
            padding = [[0, 0], [ph, ph], [pw, pw], [0, 0]]
            steps.append(
                partial(_conv, kernel=kernel, bias=bias, stride=layer.stride, padding=padding)
            )
        elif isinstance(layer, nn.ReLU):
            steps.append(tf.nn.relu)
        elif isinstance(layer, nn.MaxPool2d):
            steps.append(
                partial(
                    tf.nn.max_pool2d, ksize=layer.kernel_size, strides=layer.stride, padding="VALID"
                )
            )
        elif isinstance(layer, nn.Flatten):
            steps.append(_flatten)
        elif isinstance(layer, nn.Linear):
            weight = tf.Variable(layer.weight.detach().numpy().T, name=f"linear{index}_weight")
            bias = tf.Variable(layer.bias.detach().numpy(), name=f"linear{index}_bias")
            variables += [weight, bias]
            steps.append(partial(_linear, weight=weight, bias=bias))
        else:
            raise ArtifactError(f"layer {index}: {type(layer).__name__} has no TensorFlow export")

    def forward(x: Any) -> Any:
        x = tf.transpose(x, [0, 2, 3, 1])  # NCHW -> NHWC
        for step in steps:
            x = step(x)
        return x

    return forward, variables


def _conv(x: Any, *, kernel: Any, bias: Any, stride: Any, padding: list[list[int]]) -> Any:
    return tensorflow().nn.conv2d(x, kernel, stride, padding) + bias


def _flatten(x: Any) -> Any:
    tf = tensorflow()
    # Back to NCHW first: torch flattens channels-major.
    return tf.reshape(tf.transpose(x, [0, 3, 1, 2]), [tf.shape(x)[0], -1])


def _linear(x: Any, *, weight: Any, bias: Any) -> Any:
    return tensorflow().matmul(x, weight) + bias


def _save(model: nn.Module, example: torch.Tensor, folder: Path, names: tuple[str, str]) -> None:
    tf = tensorflow()
    input_name, output_name = names
    module = tf.Module(name="model")
    forward, variables = _layers(model)
    # Variables are saved when the module tracks them, as attributes.
    module.weights = variables
    spec = tf.TensorSpec([None, *example.shape[1:]], tf.float32, name=input_name)

    # No AutoGraph: the forward pass has no Python control flow on tensors to convert.
    @tf.function(input_signature=[spec], autograph=False)  # type: ignore[untyped-decorator]
    def serve(x: Any) -> dict[str, Any]:
        return {output_name: forward(x)}

    module.serve = serve
    tf.saved_model.save(module, str(folder), signatures={SIGNATURE: serve})


def _pack(folder: Path, member: str) -> bytes:
    """The folder as tar bytes under ``member/``, sorted and with fixed owners and times."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted([folder, *folder.rglob("*")]):
            info = tar.gettarinfo(str(path), arcname=str(Path(member) / path.relative_to(folder)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


@contextlib.contextmanager
def _unpacked(archive: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dlscope-savedmodel-") as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        yield Path(scratch)


def run_savedmodel(
    folder: Path, input_name: str, output_name: str, x: NDArray[Any]
) -> NDArray[Any]:
    """Outputs of the SavedModel at ``folder`` for ``x``, through its serving signature."""
    tf = tensorflow()
    serve = tf.saved_model.load(str(folder)).signatures[SIGNATURE]
    return np.asarray(serve(**{input_name: tf.constant(x)})[output_name].numpy())


def _variables(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "variables").iterdir())}


def export_savedmodel(
    model: nn.Module,
    example: torch.Tensor,
    path: Path,
    *,
    member: str,
    input_name: str,
    output_name: str,
    tolerance: float,
) -> None:
    """``model`` as a SavedModel folder named ``member`` inside the tar file ``path``.

    An existing archive is kept when its variables are byte for byte the ones this export
    writes and it computes the same outputs on ``example``.
    """
    with torch.inference_mode():
        expected = model(example).numpy()
    with tempfile.TemporaryDirectory(prefix="dlscope-savedmodel-") as scratch:
        folder = Path(scratch) / member
        _save(model, example, folder, (input_name, output_name))
        if path.exists():
            with contextlib.suppress(tarfile.TarError, OSError, ValueError), _unpacked(path) as old:
                kept = old / member
                if _variables(kept) == _variables(folder) and np.allclose(
                    run_savedmodel(kept, input_name, output_name, example.numpy()),
                    expected,
                    rtol=0,
                    atol=tolerance,
                ):
                    return
        packed = _pack(folder, member)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(packed)
    Path(name).chmod(0o644)
    Path(name).replace(path)
