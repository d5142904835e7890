"""Manifests: complete, code-free, versioned descriptions of models, frameworks and data sets.

The specification for users is docs/manifests.md.
"""

from shared.manifests.dataset import DatasetManifest, SampleSpec, SplitRange
from shared.manifests.fields import ElementType, FrameworkName, Hardware
from shared.manifests.framework import FrameworkManifest
from shared.manifests.kinds import MANIFEST_KINDS, Manifest
from shared.manifests.loading import load_manifest, load_manifests, parse_manifest, read_yaml
from shared.manifests.model import (
    SERVED_BY,
    Accuracy,
    CacheLink,
    FrameworkRequirement,
    Generation,
    HardwareHints,
    InputSpec,
    ModelManifest,
    OutputSpec,
    TensorSpec,
)
from shared.manifests.plugins import STEP_GROUP, installed_steps
from shared.manifests.sources import ArchiveFormat, DatasetSource, ModelSource
from shared.manifests.steps import (
    INPUT_OPS,
    OUTPUT_OPS,
    ArgmaxStep,
    CastStep,
    ChatTemplateStep,
    ColorMode,
    ColorStep,
    CropStep,
    DecodeStep,
    FlattenStep,
    InputStep,
    LayoutStep,
    NormalizeStep,
    OutputStep,
    PluginStep,
    ResizeMethod,
    ResizeStep,
    SoftmaxStep,
    TokenizeStep,
    TopKStep,
    text_steps,
)
from shared.manifests.versions import matches, parse_constraint, parse_version

__all__ = [
    "INPUT_OPS",
    "MANIFEST_KINDS",
    "OUTPUT_OPS",
    "SERVED_BY",
    "STEP_GROUP",
    "Accuracy",
    "ArchiveFormat",
    "ArgmaxStep",
    "CacheLink",
    "CastStep",
    "ChatTemplateStep",
    "ColorMode",
    "ColorStep",
    "CropStep",
    "DatasetManifest",
    "DatasetSource",
    "DecodeStep",
    "ElementType",
    "FlattenStep",
    "FrameworkManifest",
    "FrameworkName",
    "FrameworkRequirement",
    "Generation",
    "Hardware",
    "HardwareHints",
    "InputSpec",
    "InputStep",
    "LayoutStep",
    "Manifest",
    "ModelManifest",
    "ModelSource",
    "NormalizeStep",
    "OutputSpec",
    "OutputStep",
    "PluginStep",
    "ResizeMethod",
    "ResizeStep",
    "SampleSpec",
    "SoftmaxStep",
    "SplitRange",
    "TensorSpec",
    "TokenizeStep",
    "TopKStep",
    "installed_steps",
    "load_manifest",
    "load_manifests",
    "matches",
    "parse_constraint",
    "parse_manifest",
    "parse_version",
    "read_yaml",
    "text_steps",
]
