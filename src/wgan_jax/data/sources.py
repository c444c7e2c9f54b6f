"""Which image source a config names: the one place that maps `config.dataset` to a reader.

`images.py` holds what the readers share (sources, pixel conversion); each reader module
(`digits`, `folder`, `tfds_source`) imports it, and only this module imports the readers.
It also says which classes a conditional run trains on (`num_classes`, `data_num_classes`,
`class_labels`): `digits` 10, `stacked_digits` 1000 (`digits.stacked_digits_classes`),
`tfds:NAME` the ClassLabel feature `config.data_label`, `folder:/path` its subfolders
(`config.folder_classes`). Every function takes the run's `DataSpec` (built once from the
config by `DataSpec.from_config`), never the config itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgan_jax.data import digits, folder, tfds_source
from wgan_jax.data.images import ImageSource
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import ConfigError, DataError

__all__ = ["make_image_source", "num_classes", "data_num_classes", "check_num_classes",
           "class_labels"]


def make_image_source(spec: DataSpec) -> ImageSource:
    """The uint8 source `spec.dataset` names, at `spec.image_size` / `num_channels`.

    Labelled where the data has labels: always for `digits` and `stacked_digits`, with
    `folder_classes` for folders, and for `tfds:NAME` in conditional runs (`data_label`).
    """
    kind, name = spec.kind, spec.name
    size, channels = spec.image_size, spec.num_channels
    if kind == "digits":
        return digits.digits_source(size, channels)
    if kind == "stacked_digits":
        return digits.stacked_digits_source(size)
    if kind == "folder":
        return folder.folder_source(
            name, spec.data_dir, size, channels, spec.skip_corrupt_images,
            classes=spec.folder_classes,
        )
    if kind == "tfds":
        return tfds_source.tfds_image_source(
            name, spec.data_dir, size, channels, spec.data_split,
            label_key=spec.data_label if spec.conditional else None,
        )
    raise DataError(
        f"unknown dataset {spec.dataset!r}; use toy:NAME, digits, stacked_digits, tfds:NAME "
        "or folder:/path"
    )


def data_num_classes(spec: DataSpec) -> int:
    """The number of classes of `spec.dataset`'s labels, from the data's metadata (a tfds
    ClassLabel's `num_classes`, a folder's subfolders), without reading the examples.

    `ConfigError` naming the key when the data has no usable labels.
    """
    kind, name = spec.kind, spec.name
    if kind == "digits":
        return 10
    if kind == "stacked_digits":
        return digits.STACKED_CLASSES
    if kind == "folder" and spec.folder_classes:
        return len(folder.class_names(name))
    if kind == "tfds":
        return tfds_source.tfds_num_classes(name, spec.data_dir, spec.data_label)
    raise DataError(f"{spec.dataset}: has no class labels")


def num_classes(spec: DataSpec) -> int:
    """The number of classes a conditional model is built for: `spec.declared_classes`
    (`config.model.num_classes`) when set (the trainer records the data's count there in the
    run's config.json, so the run can be restored and sampled once its data is gone), else
    read from the data's metadata (a tfds ClassLabel, a folder's subfolders); 0 for an
    unconditional one."""
    if not spec.conditional:
        return 0
    if spec.declared_classes > 0:
        return int(spec.declared_classes)
    return data_num_classes(spec)


def check_num_classes(spec: DataSpec) -> None:
    """`ConfigError` when a set `model.num_classes` is not the data's class count (the trainer
    checks it before training; a restored run trusts its config.json)."""
    if not spec.conditional or spec.declared_classes <= 0:
        return
    have = data_num_classes(spec)
    if have != spec.declared_classes:
        raise ConfigError(f"config.model.num_classes: {spec.declared_classes}, but "
                          f"{spec.dataset} has {have} classes (leave it 0 to read the count "
                          "from the data)")


def class_labels(spec: DataSpec, source: Any) -> np.ndarray:
    """The int64 class `[N]` of every example of `source` (made by `make_image_source`)."""
    labels = getattr(source, "labels", None)
    if labels is None:
        raise DataError(f"{spec.dataset}: has no class labels")
    labels = np.asarray(labels)
    if spec.dataset == "stacked_digits":
        return digits.stacked_digits_classes(labels)
    return labels.astype(np.int64)
