"""``tfds:NAME``: any prepared TFDS image dataset, read with random access (no TensorFlow).

Reads one split (``config.data_split``, ``train`` by default, in TFDS's split syntax such as
``test`` or ``train[:80%]``) through `tfds` data sources (array_record files prepared beforehand,
e.g. ``tfds build NAME --data_dir DIR --file_format=array_record``). Nothing is ever downloaded
at run time: a dataset that is not prepared in the data dir is a one-line `DataError`.
Each example's image (the feature named ``image``, else the dataset's first image feature) is
centre-cropped, resized and converted to the configured channels on access. Conditional runs
read the labels of the `tfds.features.ClassLabel` feature ``config.data_label`` (``label`` by
default) once, without decoding the images; the number of classes is the ClassLabel's.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from wgan_jax.data.images import MappedSource, prepare_array
from wgan_jax.errors import ConfigError, DataError

__all__ = ["tfds_image_source", "tfds_num_classes"]


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


def _builder(name: str, data_dir: str) -> Any:
    import tensorflow_datasets as tfds

    try:
        return tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # DatasetNotFoundError, bad config or version names
        if isinstance(error, tfds.core.registered.DatasetNotFoundError):
            raise DataError(f"tfds:{name}: no TFDS dataset named {name!r}") from None
        raise DataError(f"tfds:{name}: {' '.join(str(error).split())[:200]}") from None


def _class_label(builder: Any, name: str, label_key: str) -> Any:
    """The `ClassLabel` feature `label_key`; `ConfigError` naming `config.data_label` if none."""
    import tensorflow_datasets as tfds

    features = builder.info.features
    items = dict(features.items()) if hasattr(features, "items") else {}
    feature = items.get(label_key)
    if feature is None:
        raise ConfigError(f"config.data_label: tfds:{name} has no feature {label_key!r} "
                          f"(features: {', '.join(items)})")
    if not isinstance(feature, tfds.features.ClassLabel):
        raise ConfigError(f"config.data_label: feature {label_key!r} of tfds:{name} is a "
                          f"{type(feature).__name__}, not a ClassLabel")
    return feature


def tfds_num_classes(name: str, data_dir: str, label_key: str) -> int:
    """The number of classes of ClassLabel feature `label_key` of `name` (its metadata)."""
    return int(_class_label(_builder(name, data_dir), name, label_key).num_classes)


def tfds_image_source(
    name: str, data_dir: str, size: int, channels: int, split: str = "train",
    label_key: str | None = None,
) -> MappedSource:
    """The images of split `split` of TFDS dataset `name` in `data_dir`, as a uint8 source;
    with `label_key`, labelled by that ClassLabel feature (read once, images not decoded)."""
    import tensorflow_datasets as tfds

    what = f"tfds:{name}"
    builder = _builder(name, data_dir)
    key = _image_key(builder.info.features, what)
    if label_key is not None:
        _class_label(builder, name, label_key)
    if builder.is_prepared():
        _check_split(split, builder, what)
    try:
        records = builder.as_data_source(split=split)
    except Exception as error:  # unprepared data surfaces as assorted errors in tfds
        raise _not_prepared(name, data_dir, builder, error, split) from None
    if len(records) == 0:
        raise DataError(f"{what}: the {split!r} split in {data_dir} is empty")
    labels = None
    if label_key is not None:
        plain = builder.as_data_source(split=split, decoders={key: tfds.decode.SkipDecoding()})
        labels = np.array([int(plain[i][label_key]) for i in range(len(plain))], np.int64)
    return MappedSource(records, _ImageOf(key, size, channels, what), labels)
