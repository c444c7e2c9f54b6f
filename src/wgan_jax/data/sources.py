"""Which image source a config names: the one place that maps `config.dataset` to a reader.

`images.py` holds what the readers share (sources, pixel conversion); each reader module
(`digits`, `folder`, `tfds_source`) imports it, and only this module imports the readers.
It also says which classes a conditional run trains on (`num_classes`, `data_num_classes`,
`class_labels`): `digits` 10, `stacked_digits` 1000 (`digits.stacked_digits_classes`),
`tfds:NAME` the ClassLabel feature `config.data_label`, `folder:/path` its subfolders
(`config.folder_classes`), and where prepared datasets live (`resolve_data_dir`).
"""

from __future__ import annotations

import os
from typing import Any

import ml_collections
import numpy as np

from wgan_jax.data import digits, folder, tfds_source
from wgan_jax.data.images import ImageSource
from wgan_jax.errors import ConfigError, DataError


def default_data_dir() -> str:
    """Where prepared datasets and small cached weights live unless `config.data_dir` says."""
    return os.environ.get(
        "WGAN_JAX_DATA_DIR", os.path.join(os.path.expanduser("~"), ".cache", "wgan_jax", "data")
    )


def resolve_data_dir(config: ml_collections.ConfigDict) -> str:
    """`config.data_dir`, or the default (`$WGAN_JAX_DATA_DIR` or ~/.cache/wgan_jax/data)."""
    return os.path.expanduser(config.data_dir) if config.data_dir else default_data_dir()


def _conditional(config: ml_collections.ConfigDict) -> bool:
    return config.model.conditional != "none"


def make_image_source(config: ml_collections.ConfigDict) -> ImageSource:
    """The uint8 source `config.dataset` names, at `config.image_size` / `num_channels`.

    Labelled where the data has labels: always for `digits` and `stacked_digits`, with
    `folder_classes` for folders, and for `tfds:NAME` in conditional runs (`data_label`).
    """
    kind, _, name = config.dataset.partition(":")
    size, channels = config.image_size, config.num_channels
    if kind == "digits":
        return digits.digits_source(size, channels)
    if kind == "stacked_digits":
        return digits.stacked_digits_source(size)
    if kind == "folder":
        return folder.folder_source(
            name, resolve_data_dir(config), size, channels, config.skip_corrupt_images,
            classes=config.folder_classes,
        )
    if kind == "tfds":
        return tfds_source.tfds_image_source(
            name, resolve_data_dir(config), size, channels, config.data_split,
            label_key=config.data_label if _conditional(config) else None,
        )
    raise DataError(
        f"unknown dataset {config.dataset!r}; use toy:NAME, digits, stacked_digits, tfds:NAME "
        "or folder:/path"
    )


def data_num_classes(config: ml_collections.ConfigDict) -> int:
    """The number of classes of `config.dataset`'s labels, from the data's metadata (a tfds
    ClassLabel's `num_classes`, a folder's subfolders), without reading the examples.

    `ConfigError` naming the key when the data has no usable labels.
    """
    kind, _, name = config.dataset.partition(":")
    if kind == "digits":
        return 10
    if kind == "stacked_digits":
        return digits.STACKED_CLASSES
    if kind == "folder" and config.folder_classes:
        return len(folder.class_names(name))
    if kind == "tfds":
        return tfds_source.tfds_num_classes(name, resolve_data_dir(config), config.data_label)
    raise DataError(f"{config.dataset}: has no class labels")


def num_classes(config: ml_collections.ConfigDict) -> int:
    """The number of classes a conditional model is built for: `config.model.num_classes` when
    set (the trainer records the data's count there in the run's config.json, so the run can
    be restored and sampled once its data is gone), else read from the data's metadata (a
    tfds ClassLabel, a folder's subfolders); 0 for an unconditional one."""
    if config.model.conditional == "none":
        return 0
    if config.model.num_classes > 0:
        return int(config.model.num_classes)
    return data_num_classes(config)


def check_num_classes(config: ml_collections.ConfigDict) -> None:
    """`ConfigError` when a set `model.num_classes` is not the data's class count (the trainer
    checks it before training; a restored run trusts its config.json)."""
    if config.model.conditional == "none" or config.model.num_classes <= 0:
        return
    have = data_num_classes(config)
    if have != config.model.num_classes:
        raise ConfigError(f"config.model.num_classes: {config.model.num_classes}, but "
                          f"{config.dataset} has {have} classes (leave it 0 to read the count "
                          "from the data)")


def class_labels(config: ml_collections.ConfigDict, source: Any) -> np.ndarray:
    """The int64 class `[N]` of every example of `source` (made by `make_image_source`)."""
    labels = getattr(source, "labels", None)
    if labels is None:
        raise DataError(f"{config.dataset}: has no class labels")
    labels = np.asarray(labels)
    if config.dataset == "stacked_digits":
        return digits.stacked_digits_classes(labels)
    return labels.astype(np.int64)
