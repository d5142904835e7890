"""The built-in zoo's trained models, built locally: no download, no network.

Hubs (torchvision weights, Hugging Face) are out of reach where dlscope runs, so a model
whose accuracy means something is trained here, deterministically, from data that ships
inside an installed package. ``build_digits`` trains a small CNN on scikit-learn's digits,
exports the same weights for several frameworks and writes a model manifest for each.
"""

from dlscope.zoo.digits import DIGITS_MODELS, BuiltModel, build_digits

__all__ = ["DIGITS_MODELS", "BuiltModel", "build_digits"]
