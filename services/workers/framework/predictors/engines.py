"""Compiled inference engines (TensorRT), cached on disk by what decides their bytes.

Building a TensorRT engine from an ONNX graph takes seconds to minutes, and the engine only
runs with the TensorRT version and the GPU that built it. So it is kept under
``<DLSCOPE_HOME>/engines``, named by the sha256 of everything that went into it: a changed
graph, precision, TensorRT or GPU builds a new engine and never loads a stale one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal, cast, get_args

from shared.config import default_home
from shared.errors import PredictorError
from shared.manifests import ModelManifest

__all__ = ["EngineCache", "Precision", "engine_dir", "engine_key", "precision_of"]

Precision = Literal["fp32", "fp16"]


def precision_of(manifest: ModelManifest) -> Precision:
    """The manifest's ``attributes.precision``: ``fp32`` (the default) or ``fp16``."""
    value = manifest.attributes.get("precision", "fp32")
    if value not in get_args(Precision):
        raise PredictorError(
            f"{manifest.ref}: attributes.precision is {value!r}; engines are built in "
            f"{' or '.join(get_args(Precision))}"
        )
    return cast(Precision, value)


def engine_dir(home: Path | None = None) -> Path:
    """``<home>/engines``: the worker's home, which its framework process is told
    (``handover.FrameworkOptions``), or dlscope's default home."""
    return (home or default_home()) / "engines"


def engine_key(graph: bytes, **parts: str) -> str:
    """The sha256 of the graph's bytes and of every named part (precision, versions, GPU)."""
    digest = hashlib.sha256(graph)
    for name, value in sorted(parts.items()):
        # Separated and named, so no two different sets of parts hash alike.
        digest.update(f"\0{name}={value}".encode())
    return digest.hexdigest()


class EngineCache:
    """Serialized engines under ``root``, one file per key, written whole or not at all."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.engine"

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        """The engine stored under ``key``, else ``build()``'s, stored; and whether it was built."""
        path = self.path(key)
        try:
            return path.read_bytes(), False
        except FileNotFoundError:
            pass
        engine = build()
        self.root.mkdir(parents=True, exist_ok=True)
        # Renamed into place: another worker on the host reads a whole engine or none.
        fd, staged = tempfile.mkstemp(prefix=f".{key}.", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(engine)
            Path(staged).replace(path)
        finally:
            Path(staged).unlink(missing_ok=True)
        return engine, True

    def discard(self, key: str) -> None:
        """Forget an engine that no longer deserializes (a truncated file, say)."""
        self.path(key).unlink(missing_ok=True)
