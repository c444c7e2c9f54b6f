"""The offline digits and stacked_digits datasets (real data shipped with scikit-learn)."""

from __future__ import annotations

import numpy as np
import pytest

from wgan_jax.config import get_config_schema
from wgan_jax.data import digits
from wgan_jax.data.spec import DataSpec
from wgan_jax.input_pipeline import create_input_pipeline
from wgan_jax.step import make_mesh


def test_bilinear_matrix_rows_sum_to_one_and_keep_constants():
    m = digits.bilinear_matrix(8, 32)
    np.testing.assert_allclose(m.sum(axis=1), 1.0)
    np.testing.assert_array_equal(digits.bilinear_matrix(8, 8), np.eye(8))


@pytest.mark.parametrize("size", [16, 32, 64])
def test_digits_images(size):
    images, labels = digits.digits_images(size)
    assert images.shape == (1797, size, size) and images.dtype == np.uint8
    assert labels.shape == (1797,) and set(labels) == set(range(10))
    assert images.max() == 255 and images.min() == 0
    small, _ = digits.digits_images(8)
    from sklearn.datasets import load_digits

    np.testing.assert_array_equal(small, np.rint(load_digits().images * 255 / 16))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_digits_pipeline(channels):
    c = get_config_schema()
    c.dataset, c.model.kind, c.image_size, c.num_channels = "digits", "dcgan", 32, channels
    c.global_batch_size, c.n_critic = 8, 3
    x = np.asarray(next(create_input_pipeline(DataSpec.from_config(c), make_mesh())))
    assert x.shape == (3, 8, 32, 32, channels) and x.dtype == np.float32
    assert x.min() == -1.0 and 0.5 < x.max() <= 1.0


def test_stacked_digits_source_and_labels():
    source = digits.stacked_digits_source(16)
    labels = digits.stacked_digits_labels()
    assert len(source) == digits.STACKED_SIZE and labels.shape == (digits.STACKED_SIZE, 3)
    modes = labels @ np.array([100, 10, 1])
    assert len(np.unique(modes)) == 1000  # every one of the 1000 modes is present
    grey, classes = digits.digits_images(16)
    triple = digits.stacked_digits_triples()[5]
    np.testing.assert_array_equal(source[5], np.stack([grey[j] for j in triple], axis=-1))
    np.testing.assert_array_equal(labels[5], classes[triple])


def test_stacked_digits_pipeline_with_labels():
    c = get_config_schema()
    c.dataset, c.model.kind, c.image_size, c.num_channels = "stacked_digits", "dcgan", 16, 3
    c.global_batch_size, c.n_critic = 8, 2
    it = create_input_pipeline(DataSpec.from_config(c), make_mesh())
    x = np.asarray(next(it))
    assert x.shape == (2, 8, 16, 16, 3) and x.min() >= -1 and x.max() <= 1
    assert it.reference_labels(20, 0).shape == (20, 3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mlp", "dcgan"])
def test_8px_stacked_digits_models(kind):
    """8 px is the digits' native size; the MLP pair maps z to images in [-1, 1] there too."""
    import jax

    from wgan_jax.config import data_shape, validate_config
    from wgan_jax.models import build_models

    c = get_config_schema()
    c.dataset, c.model.kind, c.image_size, c.num_channels = "stacked_digits", kind, 8, 3
    c.model.z_dim, c.model.width = 8, 16
    validate_config(c, num_devices=1)
    generator, critic = build_models(c)
    z = jax.random.normal(jax.random.PRNGKey(0), (4, 8)) * 10.0
    g_vars = generator.init(jax.random.PRNGKey(1), z, train=False)
    x = generator.apply(g_vars, z, train=False)
    assert x.shape == (4, *data_shape(c)) == (4, 8, 8, 3)
    assert float(abs(x).max()) <= 1.0
    scores = critic.apply(critic.init(jax.random.PRNGKey(2), x), x)
    assert scores.shape == (4,)
    np.testing.assert_array_equal(digits.digits_images(8)[0], digits.stacked_digits_source(8).grey)
