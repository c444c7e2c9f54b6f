"""tfds:NAME datasets through `tfds.testing.mock_data` (no real data, no download)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow_datasets as tfds

from wgan_jax.config import get_config_schema
from wgan_jax.data.tfds_source import tfds_image_source
from wgan_jax.errors import DataError
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
        it = create_input_pipeline(_config(name, size, channels, tmp_path), make_mesh())
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
