"""Tests for wgan_jax.plots: the sample image grid (the metric plots: tests/test_records.py)."""

import numpy as np
import pytest
from PIL import Image

from wgan_jax import plots


@pytest.mark.parametrize("channels,mode", [(1, "L"), (3, "RGB"), (4, "RGBA")])
def test_save_image_grid(tmp_path, channels, mode):
    images = np.linspace(-1, 1, 5 * 6 * 6 * channels).reshape(5, 6, 6, channels)
    path = tmp_path / "sub" / "grid.png"
    plots.save_image_grid(str(path), images, ncols=3, min_tile=1)
    with Image.open(path) as image:
        assert image.mode == mode
        assert image.size == (3 * 8 + 2, 2 * 8 + 2)
        pixels = np.asarray(image)
    first = pixels[2:8, 2:8]
    expected = np.round((images[0] + 1) * 127.5).astype(np.uint8)
    np.testing.assert_array_equal(first.reshape(expected.shape), expected)
    # By default small images are enlarged (6 px -> 6 x 6 = 36 px tiles), pixel for pixel.
    plots.save_image_grid(str(path), images, ncols=3)
    with Image.open(path) as image:
        assert image.size == (3 * 38 + 2, 2 * 38 + 2)
        big = np.asarray(image)[2:38, 2:38].reshape(36, 36, channels)
    np.testing.assert_array_equal(big[::6, ::6], expected.reshape(6, 6, channels))
