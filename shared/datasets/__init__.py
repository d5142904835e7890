"""Data sets: the samples a dataset manifest describes, loaded as arrays or encoded images.

A dataset manifest says what its samples are; this package produces them. Built-in data
sets come from installed Python packages (``source: {builtin: "<provider>:<name>"}``), so
they need no download and the package's version pins them:

    sklearn:digits           scikit-learn's 1 797 handwritten 8x8 digits, with labels
    skimage:<image>          one of scikit-image's sample images that ship in its wheel
    skimage:photos           four of them, colour photographs (astronaut, chelsea, coffee,
                             rocket)

``load_dataset(manifest, split)`` checks what the provider gives against the manifest (count,
shape, element type) and encodes images as the manifest's ``element.encoding`` says.
"""

from shared.datasets.builtin import PROVIDERS, BuiltinData, Provider, load_builtin
from shared.datasets.dataset import Dataset, Sample
from shared.datasets.encoding import encode_image
from shared.datasets.loading import load_dataset, split_indices

__all__ = [
    "PROVIDERS",
    "BuiltinData",
    "Dataset",
    "Provider",
    "Sample",
    "encode_image",
    "load_builtin",
    "load_dataset",
    "split_indices",
]
