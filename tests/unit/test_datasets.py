"""Built-in data sets: the samples a dataset manifest describes, from installed packages."""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import pytest
import skimage.data
from PIL import Image

from shared.config import REPOSITORY_ROOT
from shared.datasets import PROVIDERS, load_builtin, load_dataset
from shared.datasets.scikit_image import COLLECTIONS, IMAGES
from shared.errors import ArtifactError
from shared.manifests import DatasetManifest, load_manifest, parse_manifest

DATASETS = REPOSITORY_ROOT / "manifests" / "datasets"
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")


def manifest(name: str) -> DatasetManifest:
    loaded = load_manifest(DATASETS / f"{name}.yaml")
    assert isinstance(loaded, DatasetManifest)
    return loaded


def dataset(**fields: Any) -> DatasetManifest:
    """A data set manifest of one sample photograph, with ``fields`` changed."""
    data = {
        "kind": "dataset",
        "name": "one-photo",
        "version": "1.0.0",
        "source": {"builtin": "skimage:astronaut"},
        "samples": 1,
        "element": {"encoding": "png", "shape": [512, 512, 3]},
        **fields,
    }
    loaded = parse_manifest(data, origin="test manifest")
    assert isinstance(loaded, DatasetManifest)
    return loaded


def decoded(sample: object) -> np.ndarray:
    assert isinstance(sample, bytes)
    return np.asarray(Image.open(io.BytesIO(sample)))


def test_digits_are_the_1797_labelled_8x8_images_of_scikit_learn() -> None:
    digits = load_dataset(manifest("digits"))
    assert (len(digits), digits.split, digits.indices) == (1797, None, tuple(range(1797)))
    images = np.stack(digits.samples)
    assert (images.shape, images.dtype) == ((1797, 8, 8), np.dtype(np.float64))
    assert (images.min(), images.max()) == (0.0, 16.0)
    assert digits.labels is not None
    assert digits.labels.dtype == np.int64
    assert set(digits.labels.tolist()) == set(range(10))
    assert digits.class_names[:2] == ("zero", "one")
    assert len(digits.class_names) == 10


def test_the_digits_splits_are_the_first_80_and_the_last_20_percent() -> None:
    from sklearn.model_selection import train_test_split  # type: ignore[import-untyped]

    digits = manifest("digits")
    train, test = load_dataset(digits, "train"), load_dataset(digits, "test")
    assert (len(train), len(test)) == (1437, 360)
    assert train.indices + test.indices == tuple(range(digits.samples))
    # The documented equivalent: scikit-learn's own split, without shuffling.
    expected_train, expected_test = train_test_split(range(1797), test_size=0.2, shuffle=False)
    assert (list(train.indices), list(test.indices)) == (expected_train, expected_test)
    assert test.labels is not None
    assert set(test.labels.tolist()) == set(range(10))  # every class is tested


def test_loading_digits_twice_gives_the_same_samples_and_labels() -> None:
    first, again = (
        load_dataset(manifest("digits"), "test"),
        load_dataset(manifest("digits"), "test"),
    )
    assert np.array_equal(np.stack(first.samples), np.stack(again.samples))
    assert first.labels is not None
    assert again.labels is not None
    assert np.array_equal(first.labels, again.labels)


def test_samples_cannot_be_changed_in_place_behind_the_data_set() -> None:
    digits = load_dataset(manifest("digits"), "test")
    sample = digits.samples[0]
    assert isinstance(sample, np.ndarray)
    with pytest.raises(ValueError, match="read-only"):
        sample[0, 0] = 99.0


def test_each_sample_photo_is_a_png_of_the_declared_shape_with_scikit_images_pixels() -> None:
    photos = manifest("sample-photos")
    assert photos.element.encoding == "png"
    assert photos.element.shape == [-1, -1, 3]
    loaded = load_dataset(photos)
    assert (len(loaded), loaded.labels, loaded.class_names) == (4, None, ())
    for sample, name in zip(loaded.samples, PHOTOS, strict=True):
        assert isinstance(sample, bytes)
        assert sample.startswith(b"\x89PNG\r\n\x1a\n")
        pixels = decoded(sample)
        assert pixels.ndim == 3
        assert pixels.shape[2] == 3
        assert np.array_equal(pixels, getattr(skimage.data, name)())  # lossless


@pytest.mark.parametrize("name", PHOTOS)
def test_a_sample_photo_is_a_split_of_its_own(name: str) -> None:
    (photo,) = load_dataset(manifest("sample-photos"), name).samples
    assert decoded(photo).shape == getattr(skimage.data, name)().shape


@pytest.mark.parametrize("name", IMAGES)
def test_every_offered_scikit_image_sample_loads_without_a_network(name: str) -> None:
    (image,) = load_builtin(f"skimage:{name}").samples
    assert image.dtype == np.uint8
    assert image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)


def test_an_image_can_be_declared_as_jpeg_or_as_an_array() -> None:
    (jpeg,) = load_dataset(dataset(element={"encoding": "jpeg"})).samples
    assert isinstance(jpeg, bytes)
    assert jpeg.startswith(b"\xff\xd8")
    assert decoded(jpeg).shape == (512, 512, 3)
    (array,) = load_dataset(
        dataset(element={"shape": [512, 512, 3], "element_type": "uint8"})
    ).samples
    assert isinstance(array, np.ndarray)
    assert np.array_equal(array, load_builtin("skimage:astronaut").samples[0])


@pytest.mark.parametrize(
    ("builtin", "message"),
    [
        ("tfds:mnist", "no data set provider 'tfds' (providers: dlscope, skimage, sklearn)"),
        ("sklearn:iris", "sklearn has no data set 'iris' (sklearn data sets: digits)"),
        ("skimage:eagle", "skimage has no data set 'eagle' (skimage data sets: astronaut,"),
    ],
)
def test_an_unknown_provider_or_data_set_is_refused_naming_those_there_are(
    builtin: str, message: str
) -> None:
    with pytest.raises(ArtifactError, match=re.escape(message)):
        load_dataset(dataset(source={"builtin": builtin}))


def test_the_providers_offer_what_the_manifests_use() -> None:
    assert "digits" in PROVIDERS["sklearn"].names
    assert {*PHOTOS, *COLLECTIONS} <= set(PROVIDERS["skimage"].names)
    assert COLLECTIONS["photos"] == PHOTOS


def test_an_unknown_split_is_refused_naming_the_splits() -> None:
    with pytest.raises(ArtifactError, match=r"has no split 'validation' \(splits: train, test\)"):
        load_dataset(manifest("digits"), "validation")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"samples": 2}, "declares 2 samples but skimage:astronaut has 1"),
        (
            {"element": {"encoding": "png", "shape": [-1, -1]}},
            r"sample 0 has shape \[512, 512, 3\]",
        ),
        (
            {"element": {"shape": [-1, -1, 3], "element_type": "float32"}},
            "sample 0 is uint8 but the manifest declares float32",
        ),
    ],
)
def test_data_that_differs_from_its_manifest_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ArtifactError, match=message):
        load_dataset(dataset(**fields))


def test_labels_without_a_class_name_are_refused() -> None:
    digits = manifest("digits").model_dump(exclude={"labels"})
    too_few = parse_manifest({**digits, "labels": ["zero"]}, origin="test manifest")
    assert isinstance(too_few, DatasetManifest)
    with pytest.raises(
        ArtifactError, match=r"label \d has no class name \(the manifest names 1 classes"
    ):
        load_dataset(too_few, "test")


def test_a_data_set_in_a_file_is_not_loaded_yet_and_says_so() -> None:
    in_a_file = dataset(source={"uri": "/data/photos.tar", "sha256": "a" * 64})
    with pytest.raises(ArtifactError, match=r"only built-in data sets .* not /data/photos.tar"):
        load_dataset(in_a_file)
