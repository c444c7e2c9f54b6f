"""tfds:NAME datasets: a small dataset written to disk here with tfds's own builder and
array_record writer and read back pixel for pixel, and the catalogue's datasets through
`tfds.testing.mock_data` (no real data, no download)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from wgan_jax.config import get_config_schema, validate_config
from wgan_jax.data.spec import DataSpec
from wgan_jax.data.tfds_source import tfds_image_source
from wgan_jax.errors import ConfigError, DataError
from wgan_jax.input_pipeline import create_input_pipeline
from wgan_jax.step import make_mesh


def _config(name: str, size: int, channels: int, data_dir) -> object:
    c = get_config_schema()
    c.dataset = f"tfds:{name}"
    c.data_dir = str(data_dir)
    c.model.kind, c.image_size, c.num_channels = "dcgan", size, channels
    c.global_batch_size, c.n_critic = 4, 2
    return c


@pytest.mark.parametrize(
    "name,size,channels",
    [("mnist", 32, 1), ("mnist", 16, 3), ("cifar10", 32, 3), ("cifar10", 16, 1),
     ("celeb_a", 64, 3), ("celeb_a", 16, 4)],
)
def test_tfds_batches(tmp_path, name, size, channels):
    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        spec = DataSpec.from_config(_config(name, size, channels, tmp_path))
        it = create_input_pipeline(spec, make_mesh())
        x = np.asarray(next(it))
        ref = it.reference_samples(3, 0)
    assert x.shape == (2, 4, size, size, channels) and x.dtype == np.float32
    assert x.min() >= -1 and x.max() <= 1 and x.std() > 0
    assert ref.shape == (3, size, size, channels)


def test_unprepared_dataset_is_one_line_naming_it_and_the_data_dir(tmp_path):
    with pytest.raises(DataError) as error:
        tfds_image_source("mnist", str(tmp_path), 32, 1)
    message = str(error.value)
    assert "tfds:mnist" in message and str(tmp_path) in message and "\n" not in message


def test_missing_data_dir_and_unknown_name(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        tfds_image_source("mnist", str(tmp_path / "nope"), 32, 1)
    with pytest.raises(DataError, match="no TFDS dataset named 'no_such_dataset'") as error:
        tfds_image_source("no_such_dataset", str(tmp_path), 32, 1)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------- a dataset written to disk here
SPLITS = {"train": (0, 6), "test": (1, 5)}  # split -> (seed, number of examples)


def _pictures(split: str) -> np.ndarray:
    seed, n = SPLITS[split]
    return np.random.default_rng(seed).integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


class WganJaxTestPictures(tfds.core.GeneratorBasedBuilder):
    """Two splits of 8x8 RGB pictures whose image feature is called `picture`, not `image`;
    picture i has label i % 3 of a ClassLabel with 4 classes (class 3 has no examples)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "label": tfds.features.ClassLabel(num_classes=4),
            "picture": tfds.features.Image(shape=(None, None, 3)),
        }))

    def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_examples(split) for split in SPLITS}

    def _generate_examples(self, split):
        for i, pixels in enumerate(_pictures(split)):
            yield i, {"label": i % 3, "picture": _png(pixels)}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> str:
    """A data_dir holding the prepared array_record files of `WganJaxTestPictures`."""
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    WganJaxTestPictures(data_dir=data_dir).download_and_prepare(file_format="array_record")
    return data_dir


def _sorted(images: np.ndarray) -> np.ndarray:
    return images[np.lexsort(images.reshape(len(images), -1).T)]


@pytest.mark.parametrize("split", ["train", "test"])
def test_written_dataset_reads_back_the_written_pixels(written, split):
    source = tfds_image_source("wgan_jax_test_pictures", written, 8, 3, split)
    got = np.stack([source[i] for i in range(len(source))])
    # The writer shuffles the examples: compare the sets of images.
    np.testing.assert_array_equal(_sorted(got), _sorted(_pictures(split)))


def test_written_dataset_through_the_pipeline_with_data_split(written):
    c = _config("wgan_jax_test_pictures", 8, 3, written)
    c.data_split = "test"
    c.global_batch_size, c.n_critic = 5, 1
    validate_config(c, 1)
    x = np.asarray(next(create_input_pipeline(DataSpec.from_config(c), make_mesh())))[0]
    expected = _pictures("test").astype(np.float32) / 127.5 - 1.0
    np.testing.assert_allclose(_sorted(x), _sorted(expected), atol=1e-6)
    c.data_split = "train[:2]"
    source = tfds_image_source("wgan_jax_test_pictures", written, 8, 3, c.data_split)
    assert len(source) == 2


def test_data_split_errors(written):
    with pytest.raises(DataError, match="no split 'validation'.*test, train") as error:
        tfds_image_source("wgan_jax_test_pictures", written, 8, 3, "validation")
    assert "\n" not in str(error.value)
    c = _config("wgan_jax_test_pictures", 8, 3, written)
    c.dataset, c.data_split = "digits", "test"
    with pytest.raises(ConfigError, match="config.data_split: only tfds"):
        validate_config(c, 1)
    c.data_split = " "
    with pytest.raises(ConfigError, match="config.data_split"):
        validate_config(c, 1)


# ------------------------------------------------------------- labels of conditional runs
def _conditional(data_dir, **overrides) -> object:
    c = _config("wgan_jax_test_pictures", 8, 3, data_dir)
    c.model.kind, c.model.conditional, c.global_batch_size, c.n_critic = "mlp", "projection", 6, 1
    for key, value in overrides.items():
        c[key] = value
    validate_config(c, 1)
    return c


def test_labels_are_each_pictures_class_label(written):
    from wgan_jax.data.sources import num_classes

    source = tfds_image_source("wgan_jax_test_pictures", written, 8, 3, "train", "label")
    label_of = {p.tobytes(): i % 3 for i, p in enumerate(_pictures("train"))}
    assert [label_of[source[i].tobytes()] for i in range(len(source))] == list(source.labels)
    c = _conditional(written)
    assert num_classes(DataSpec.from_config(c)) == 4  # the ClassLabel's, not labels' maximum + 1
    it = create_input_pipeline(DataSpec.from_config(c), make_mesh())
    np.testing.assert_allclose(it.class_frequencies, [1 / 3, 1 / 3, 1 / 3, 0.0])
    images, labels = next(it)
    pixels = np.rint((np.asarray(images)[0] + 1.0) * 127.5).astype(np.uint8)
    assert [label_of[p.tobytes()] for p in pixels] == np.asarray(labels)[0].tolist()


@pytest.mark.parametrize("label, words", [
    ("nope", ["no feature 'nope'", "label, picture"]),
    ("picture", ["'picture'", "Image, not a ClassLabel"]),
])
def test_data_label_refusals_name_the_key(written, label, words):
    from wgan_jax.data.sources import num_classes

    c = _conditional(written, data_label=label)
    spec = DataSpec.from_config(c)
    for build in (lambda: num_classes(spec), lambda: create_input_pipeline(spec, make_mesh())):
        with pytest.raises(ConfigError) as error:
            build()
        message = str(error.value)
        assert message.startswith("config.data_label: ") and "\n" not in message
        for word in ["tfds:wgan_jax_test_pictures", *words]:
            assert word in message, message


@pytest.mark.slow
def test_conditional_run_on_a_tfds_dataset(written, tmp_path):
    from test_conditional_data import train_two_iterations

    overrides = {"dataset": "tfds:wgan_jax_test_pictures", "data_dir": written,
                 "num_channels": 3, "global_batch_size": 6}
    assert train_two_iterations(overrides, str(tmp_path / "run")) == (4, (4, 8))
