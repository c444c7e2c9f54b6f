"""Which image source a config names: the one place that maps `config.dataset` to a reader.

`images.py` holds what the readers share (sources, pixel conversion); each reader module
(`digits`, `folder`, `tfds_source`) imports it, and only this module imports the readers.
"""

from __future__ import annotations

import ml_collections

from wgan_jax.config import resolve_data_dir
from wgan_jax.data import digits, folder, tfds_source
from wgan_jax.data.images import ImageSource
from wgan_jax.errors import DataError


def make_image_source(config: ml_collections.ConfigDict) -> ImageSource:
    """The uint8 source `config.dataset` names, at `config.image_size` / `num_channels`."""
    kind, _, name = config.dataset.partition(":")
    size, channels = config.image_size, config.num_channels
    if kind == "digits":
        return digits.digits_source(size, channels)
    if kind == "stacked_digits":
        return digits.stacked_digits_source(size)
    if kind == "folder":
        return folder.folder_source(
            name, resolve_data_dir(config), size, channels, config.skip_corrupt_images
        )
    if kind == "tfds":
        return tfds_source.tfds_image_source(
            name, resolve_data_dir(config), size, channels, config.data_split
        )
    raise DataError(
        f"unknown dataset {config.dataset!r}; use toy:NAME, digits, stacked_digits, tfds:NAME "
        "or folder:/path"
    )
