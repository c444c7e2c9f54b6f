"""``tfds:NAME``: any prepared TFDS image dataset, read with random access (no TensorFlow).

Reads one split (``config.data_split``, ``train`` by default, in TFDS's split syntax such as
``test`` or ``train[:80%]``) through `tfds` data sources (array_record files prepared beforehand,
e.g. ``tfds build NAME --data_dir DIR --file_format=array_record``). Nothing is ever downloaded
at run time: a dataset that is not prepared in the data dir is a one-line `DataError`.
Each example's image (the feature named ``image``, else the dataset's first image feature) is
centre-cropped, resized and converted to the configured channels on access.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from wgan_jax.data.images import MappedSource, prepare_array
from wgan_jax.errors import DataError


def _image_key(features: Any, what: str) -> str:
    import tensorflow_datasets as tfds

    items = dict(features.items()) if hasattr(features, "items") else {}
    if isinstance(items.get("image"), tfds.features.Image):
        return "image"
    for key, feature in items.items():
        if isinstance(feature, tfds.features.Image):
            return key
    raise DataError(f"{what}: the dataset has no image feature (features: {', '.join(items)})")


class _ImageOf:
    """example dict -> uint8 `[size, size, channels]` of its image feature."""

    def __init__(self, key: str, size: int, channels: int, what: str) -> None:
        self.key, self.size, self.channels, self.what = key, size, channels, what

    def __call__(self, example: dict[str, Any]) -> np.ndarray:
        return prepare_array(example[self.key], self.size, self.channels, self.what)


def _not_prepared(
    name: str, data_dir: str, builder: Any, error: Exception, split: str
) -> DataError:
    if not os.path.isdir(data_dir):
        return DataError(f"tfds:{name}: data_dir {data_dir} does not exist (set config.data_dir "
                         "to the directory holding prepared TFDS datasets)")
    if builder is not None and not builder.is_prepared():
        return DataError(
            f"tfds:{name}: not prepared in data_dir {data_dir}; prepare it offline with "
            f"`tfds build {name} --data_dir={data_dir} --file_format=array_record` "
            "(nothing is downloaded at run time)"
        )
    first = " ".join(str(error).split())[:200]
    return DataError(f"tfds:{name}: cannot open split {split!r} (config.data_split) of the "
                     f"prepared data in {data_dir} (it must be array_record for random access): "
                     f"{first}")


def _check_split(split: str, builder: Any, what: str) -> None:
    """A split that names none of the dataset's splits is a one-line `DataError`."""
    available = sorted(builder.info.splits)
    names = [part.split("[")[0].strip() for part in split.split("+")]  # "train[:10%]+test"
    if available and any(name not in available for name in names):
        raise DataError(f"{what}: no split {split!r} (config.data_split); the dataset has "
                        f"{', '.join(available)}")


def tfds_image_source(
    name: str, data_dir: str, size: int, channels: int, split: str = "train"
) -> MappedSource:
    """The images of split `split` of TFDS dataset `name` in `data_dir`, as a uint8 source."""
    import tensorflow_datasets as tfds

    what = f"tfds:{name}"
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # DatasetNotFoundError, bad config or version names
        if isinstance(error, tfds.core.registered.DatasetNotFoundError):
            raise DataError(f"{what}: no TFDS dataset named {name!r}") from None
        raise DataError(f"{what}: {' '.join(str(error).split())[:200]}") from None
    key = _image_key(builder.info.features, what)
    if builder.is_prepared():
        _check_split(split, builder, what)
    try:
        records = builder.as_data_source(split=split)
    except Exception as error:  # unprepared data surfaces as assorted errors in tfds
        raise _not_prepared(name, data_dir, builder, error, split) from None
    if len(records) == 0:
        raise DataError(f"{what}: the {split!r} split in {data_dir} is empty")
    return MappedSource(records, _ImageOf(key, size, channels, what))
