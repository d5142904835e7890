"""Pre- and post-processing compute what docs/manifests.md specifies, value for value."""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from shared.manifests import (
    ArgmaxStep,
    CastStep,
    ColorStep,
    CropStep,
    DecodeStep,
    FlattenStep,
    InputSpec,
    LayoutStep,
    NormalizeStep,
    OutputSpec,
    PluginStep,
    ResizeStep,
    SoftmaxStep,
    TopKStep,
    plugins,
)
from shared.processing import (
    ProcessingError,
    TopK,
    batch,
    crop_origin,
    load_step,
    postprocess,
    preprocess,
    preprocess_batch,
    resized_size,
)

Array = npt.NDArray[Any]
IMAGENET = InputSpec.model_validate(
    {
        "name": "data_0",
        "shape": [1, 3, 224, 224],
        "layout": "NCHW",
        "steps": [
            {"op": "decode", "color_mode": "RGB"},
            {"op": "resize", "size": 256, "method": "bilinear", "keep_aspect": True},
            {"op": "crop", "size": 224, "position": "center"},
            {
                "op": "normalize",
                "mean": [0.485, 0.456, 0.406],
                "std": [0.229, 0.224, 0.225],
                "scale": 255.0,
            },
            {"op": "layout", "to": "NCHW"},
        ],
    }
)


def invert(data: Array, params: Mapping[str, Any]) -> Array:
    """A step plugin, as an operator would install one."""
    return np.asarray(params.get("peak", 255) - data)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    entries = [EntryPoint("invert", f"{__name__}:invert", plugins.STEP_GROUP)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: entries)
    load_step.cache_clear()
    yield entries
    load_step.cache_clear()


def photo(width: int = 320, height: int = 240) -> bytes:
    """A JPEG of a Mandelbrot rendering: detail at every scale, like a photograph."""
    grey = Image.effect_mandelbrot((width, height), (-2.0, -1.2, 1.0, 1.2), 64)
    rgb = Image.merge("RGB", (grey, grey.transpose(Image.Transpose.FLIP_LEFT_RIGHT), grey))
    encoded = io.BytesIO()
    rgb.save(encoded, format="JPEG", quality=90)
    return encoded.getvalue()


def rgb_image(pixels: list[list[tuple[int, int, int]]]) -> Array:
    return np.asarray(pixels, dtype=np.uint8)


def test_normalize_divides_by_scale_then_subtracts_the_mean_per_channel() -> None:
    pixel = rgb_image([[(0, 51, 255)]])
    step = NormalizeStep(mean=[0.5, 0.2, 0.5], std=[0.25, 0.5, 0.25], scale=255.0)
    out = preprocess([step], pixel)
    assert out.dtype == np.float32
    # (0/255 - 0.5)/0.25, (51/255 - 0.2)/0.5, (255/255 - 0.5)/0.25
    np.testing.assert_allclose(out[0, 0], [-2.0, 0.0, 2.0], atol=1e-6)
    one_for_all = preprocess([NormalizeStep(mean=[100.0], std=[2.0])], pixel)
    np.testing.assert_allclose(one_for_all[0, 0], [-50.0, -24.5, 77.5])


def test_normalize_finds_the_channels_after_a_layout_step() -> None:
    pixel = rgb_image([[(10, 20, 30)]])
    out = preprocess(
        [LayoutStep(to="NCHW"), NormalizeStep(mean=[10, 20, 30], std=[1, 2, 5])], pixel
    )
    assert out.shape == (3, 1, 1)
    np.testing.assert_array_equal(out[:, 0, 0], [0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    ("height", "width", "size", "origin"),
    [
        (5, 8, (3, 4), (1, 2)),
        (6, 6, (3, 3), (2, 2)),  # 1.5 rounds half to even: 2
        (3, 3, (2, 2), (0, 0)),  # 0.5 rounds half to even: 0
        (256, 341, (224, 224), (16, 58)),  # 58.5 -> 58, as torchvision's CenterCrop
    ],
)
def test_a_centred_crop_starts_where_torchvision_starts(
    height: int, width: int, size: tuple[int, int], origin: tuple[int, int]
) -> None:
    assert crop_origin(height, width, CropStep(size=size)) == origin


def test_a_crop_cuts_the_window_from_the_image() -> None:
    image = np.arange(5 * 8 * 3, dtype=np.uint8).reshape(5, 8, 3)
    centred = preprocess([CropStep(size=(3, 4))], image)
    np.testing.assert_array_equal(centred, image[1:4, 2:6])
    corner = preprocess([CropStep(size=2, position="top_left")], image)
    np.testing.assert_array_equal(corner, image[:2, :2])
    with pytest.raises(ProcessingError, match="cannot crop 6x6 from a 5x8 image: resize it first"):
        preprocess([CropStep(size=6)], image)


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        (480, 640, (256, 341)),
        (640, 480, (341, 256)),
        (300, 300, (256, 256)),
        (100, 1000, (256, 2560)),
    ],
)
def test_keep_aspect_sets_the_shorter_side_and_truncates_the_longer(
    height: int, width: int, expected: tuple[int, int]
) -> None:
    step = ResizeStep(size=256, keep_aspect=True)
    assert resized_size(height, width, step) == expected
    image = np.zeros((height, width, 3), dtype=np.uint8)
    assert preprocess([step], image).shape == (*expected, 3)


def test_resize_without_keep_aspect_takes_height_then_width() -> None:
    image = np.zeros((10, 20, 3), dtype=np.uint8)
    assert preprocess([ResizeStep(size=(4, 7))], image).shape == (4, 7, 3)


def test_nearest_resize_repeats_pixels_and_area_resize_averages_blocks() -> None:
    image = rgb_image([[(0, 0, 0), (255, 255, 255)], [(10, 20, 30), (40, 50, 60)]])
    doubled = preprocess([ResizeStep(size=4, method="nearest")], image)
    np.testing.assert_array_equal(doubled, image.repeat(2, axis=0).repeat(2, axis=1))
    floats = np.arange(16, dtype=np.float32).reshape(4, 4, 1)
    halved = preprocess([ResizeStep(size=2, method="area")], floats)
    # Each output pixel is the mean of a 2x2 block: (0+1+4+5)/4, (2+3+6+7)/4, ...
    np.testing.assert_allclose(halved[..., 0], [[2.5, 4.5], [10.5, 12.5]], rtol=1e-6)
    assert halved.dtype == np.float32


def test_bilinear_resize_keeps_a_flat_image_flat_in_any_channel_count() -> None:
    flat = np.full((6, 9, 4), 77, dtype=np.uint8)
    out = preprocess([ResizeStep(size=(3, 5), method="bilinear")], flat)
    assert out.shape == (3, 5, 4)
    assert (out == 77).all()


def test_layout_moves_the_channel_axis_of_a_sample_and_of_a_batch() -> None:
    image = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    chw = preprocess([LayoutStep(to="NCHW")], image)
    assert chw.shape == (4, 2, 3)
    assert chw[3, 1, 2] == image[1, 2, 3]
    back = preprocess([LayoutStep(to="NCHW"), LayoutStep(to="NHWC")], image)
    np.testing.assert_array_equal(back, image)
    nchw = preprocess_batch([LayoutStep(to="NCHW")], [image, image + 1])
    assert nchw.shape == (2, 4, 2, 3)
    assert nchw[1, 3, 1, 2] == image[1, 2, 3] + 1


def test_colour_conversions_swap_weigh_and_repeat_channels() -> None:
    image = rgb_image([[(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 20, 30)]])
    bgr = preprocess([ColorStep(to="BGR")], image)
    np.testing.assert_array_equal(bgr[0, 3], [30, 20, 10])
    grey = preprocess([ColorStep(to="GRAY")], image)
    # L = (R*19595 + G*38470 + B*7471 + 32768) >> 16, Pillow's ITU-R 601-2 luma.
    np.testing.assert_array_equal(grey[0, :, 0], [76, 150, 29, 18])
    np.testing.assert_array_equal(grey[..., 0], np.asarray(Image.fromarray(image).convert("L")))
    assert (preprocess([ColorStep(to="RGB")], grey) == grey).all()
    assert preprocess([ColorStep(to="GRAY"), ColorStep(to="RGB")], image).shape == (1, 4, 3)


def test_decode_reads_encoded_bytes_in_the_colour_mode_asked() -> None:
    encoded = io.BytesIO()
    Image.fromarray(rgb_image([[(10, 20, 30)]])).save(encoded, format="PNG")
    assert preprocess([DecodeStep(color_mode="RGB")], encoded.getvalue())[0, 0].tolist() == [
        10,
        20,
        30,
    ]
    assert preprocess([DecodeStep(color_mode="BGR")], encoded.getvalue())[0, 0].tolist() == [
        30,
        20,
        10,
    ]
    assert preprocess([DecodeStep(color_mode="GRAY")], encoded.getvalue()).shape == (1, 1, 1)
    with pytest.raises(ProcessingError, match="cannot decode the sample as an image"):
        preprocess([DecodeStep()], b"not an image")
    with pytest.raises(ProcessingError, match=r"start the steps with \{op: decode\}"):
        preprocess([CropStep(size=1)], encoded.getvalue())


def test_cast_rounds_half_to_even_and_clips_to_the_range() -> None:
    values = np.asarray([[[-1.5, 0.5, 1.5, 2.5, 300.0]]], dtype=np.float32)
    np.testing.assert_array_equal(
        preprocess([CastStep(dtype="uint8")], values), [[[0, 0, 2, 2, 255]]]
    )
    np.testing.assert_array_equal(
        preprocess([CastStep(dtype="bool")], values), [[[True, True, True, True, True]]]
    )
    wide = np.asarray([[[-1000, 5, 1000]]], dtype=np.int64)
    np.testing.assert_array_equal(preprocess([CastStep(dtype="int8")], wide), [[[-128, 5, 127]]])
    small = np.asarray([[[0, 200]]], dtype=np.uint8)
    np.testing.assert_array_equal(preprocess([CastStep(dtype="int8")], small), [[[0, 127]]])


def test_softmax_sums_to_one_without_overflowing() -> None:
    logits = np.asarray([[0.0, math.log(2), math.log(3)], [1000.0, 1000.0, 1000.0]])
    probabilities = postprocess([SoftmaxStep()], logits)
    assert isinstance(probabilities, np.ndarray)
    np.testing.assert_allclose(probabilities, [[1 / 6, 2 / 6, 3 / 6], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(probabilities.sum(axis=-1), [1.0, 1.0])


def test_top_k_orders_best_first_with_ties_to_the_lower_index(tmp_path: Path) -> None:
    scores = np.asarray([[0.1, 0.4, 0.4, 0.05, 0.05], [0.0, 0.0, 0.0, 0.9, 0.1]], dtype=np.float32)
    (tmp_path / "labels.txt").write_text("ant\nbee\ncat\ndog\neel\n\n")
    result = postprocess([TopKStep(k=3, labels=str(tmp_path / "labels.txt"))], scores)
    assert isinstance(result, TopK)
    np.testing.assert_array_equal(result.indices, [[1, 2, 0], [3, 4, 0]])
    np.testing.assert_allclose(result.scores, [[0.4, 0.4, 0.1], [0.9, 0.1, 0.0]])
    assert result.labels is not None
    assert result.labels.tolist() == [["bee", "cat", "ant"], ["dog", "eel", "ant"]]
    unlabelled = postprocess([TopKStep(k=1)], scores)
    assert isinstance(unlabelled, TopK)
    assert unlabelled.labels is None
    with pytest.raises(ProcessingError, match="top-6 asked of an output with 5 classes"):
        postprocess([TopKStep(k=6)], scores)
    with pytest.raises(ProcessingError, match="the output has 5 classes but there are 2 labels"):
        postprocess([TopKStep(k=1, labels=["a", "b"])], scores)


def test_argmax_and_flatten_reduce_a_batch_of_outputs() -> None:
    outputs = np.asarray([[2, 7, 7], [9, 1, 0]], dtype=np.float32).reshape(2, 3, 1, 1)
    flat = postprocess([FlattenStep()], outputs)
    assert isinstance(flat, np.ndarray)
    assert flat.shape == (2, 3)
    classes = postprocess([FlattenStep(), ArgmaxStep()], outputs)
    assert isinstance(classes, np.ndarray)
    assert classes.tolist() == [1, 0]  # the first of equal maxima


def test_a_plugin_step_runs_the_installed_callable_with_its_params(
    installed: list[EntryPoint],
) -> None:
    image = rgb_image([[(0, 100, 255)]])
    out = preprocess([PluginStep(name="invert", params={"peak": 255})], image)
    assert out[0, 0].tolist() == [255, 155, 0]
    scores = postprocess([PluginStep(name="invert", params={"peak": 1})], np.asarray([0.25]))
    assert isinstance(scores, np.ndarray)
    assert scores.tolist() == [0.75]
    with pytest.raises(ProcessingError, match=r"no step plugin 'blur' .* \(installed: invert\)"):
        preprocess([PluginStep(name="blur")], image)


def test_a_batch_is_the_samples_processed_one_by_one_then_stacked() -> None:
    samples = [photo(320, 240), photo(240, 320), photo(300, 300)]
    one_by_one = np.stack([preprocess(IMAGENET.steps, s) for s in samples])
    batched = preprocess_batch(IMAGENET.steps, samples)
    assert batched.shape == (3, 3, 224, 224)
    assert batched.tobytes() == one_by_one.tobytes()


def test_samples_of_different_shapes_do_not_make_a_batch() -> None:
    with pytest.raises(ProcessingError, match=r"found \[2, 2, 3\] uint8, \[4, 4, 3\] uint8"):
        batch([np.zeros((4, 4, 3), np.uint8), np.zeros((2, 2, 3), np.uint8)])
    with pytest.raises(ProcessingError, match="at least one sample"):
        preprocess_batch(IMAGENET.steps, [])


def test_the_imagenet_pipeline_matches_the_reference_computation() -> None:
    sample = photo(320, 240)
    tensor = preprocess_batch(IMAGENET.steps, [sample])
    # By hand: the shorter side (240) to 256 makes 256x341; the centred 224 window starts at
    # (16, 58); then /255, minus the mean, over the std, channels first.
    decoded = Image.open(io.BytesIO(sample)).convert("RGB")
    resized = np.asarray(decoded.resize((341, 256), Image.Resampling.BILINEAR))
    window = resized[16:240, 58:282].astype(np.float32) / np.float32(255.0)
    mean = np.asarray([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.asarray([0.229, 0.224, 0.225], dtype=np.float32)
    expected = ((window - mean) / std).transpose(2, 0, 1)[np.newaxis]
    assert tensor.dtype == np.float32
    assert tensor.flags.c_contiguous
    assert tensor.tobytes() == expected.tobytes()


def test_the_pipeline_feeds_the_built_in_squeezenet_and_reads_its_top_5() -> None:
    import onnxruntime  # the reference framework, a dependency of dlscope

    spec = importlib.util.find_spec("onnx")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    onnx_root = Path(next(iter(spec.submodule_search_locations)))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(onnx_root / "backend/test/data/light/light_squeezenet.onnx"), options
    )
    (output,) = session.run(None, {"data_0": preprocess_batch(IMAGENET.steps, [photo()])})
    answer = OutputSpec.model_validate(
        {
            "name": "softmaxout_1",
            "shape": [1, 1000, 1, 1],
            "steps": [{"op": "flatten"}, {"op": "topk", "k": 5}],
        }
    )
    top5 = postprocess(answer.steps, output)
    assert isinstance(top5, TopK)
    assert top5.indices.shape == (1, 5)
    assert (np.diff(top5.scores[0]) <= 0).all()
