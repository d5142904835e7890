"""Declarative pre- and post-processing, implemented once on numpy and Pillow.

Every framework is fed by these functions from a manifest's steps, so a difference between
frameworks is the frameworks', never their input pipelines'. The semantics of each step are
specified in docs/manifests.md.
"""

from shared.processing.errors import ProcessingError
from shared.processing.images import crop_origin, resized_size
from shared.processing.plugins import StepFunction, load_step
from shared.processing.postprocess import (
    TopK,
    argmax,
    postprocess,
    read_labels,
    softmax,
    top_k,
)
from shared.processing.preprocess import batch, preprocess, preprocess_batch

__all__ = [
    "ProcessingError",
    "StepFunction",
    "TopK",
    "argmax",
    "batch",
    "crop_origin",
    "load_step",
    "postprocess",
    "preprocess",
    "preprocess_batch",
    "read_labels",
    "resized_size",
    "softmax",
    "top_k",
]
