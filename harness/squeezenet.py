"""onnx's own light SqueezeNet, as a user's model in the tests: where onnx ships it, its
digest, and a manifest that registers a copy of it under another name."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["SQUEEZENET_PKG", "SQUEEZENET_SHA", "squeezenet_copy", "squeezenet_file"]

SQUEEZENET_PKG = "pkg://onnx/backend/test/data/light/light_squeezenet.onnx"
SQUEEZENET_SHA = "770b0f3c8623e18bf58b53754d710051b4c268248422142980a132bbe6dfe908"


def squeezenet_file() -> Path:
    """The file itself, in the installed onnx package."""
    spec = importlib.util.find_spec("onnx")
    origin = None if spec is None else spec.origin
    assert origin is not None, "onnx is installed with dlscope"
    return Path(origin).parent / "backend/test/data/light/light_squeezenet.onnx"


def squeezenet_copy(name: str, description: str, *, uri: str = "net.onnx") -> str:
    """A YAML manifest of the model as ``name`` 1.0.0, its file at ``uri`` (by default a
    relative path: the file uploaded with it, or beside the manifest)."""
    return f"""
name: {name}
version: 1.0.0
description: {description}
framework: {{name: onnxruntime}}
inputs: [{{name: data_0, shape: [1, 3, 224, 224]}}]
outputs: [{{name: softmaxout_1, shape: [1, 1000, 1, 1]}}]
source: {{uri: {uri}, sha256: {SQUEEZENET_SHA}}}
"""
