"""`DataSpec`: what the data layer reads from a run's config, as one frozen typed bundle.

The trainer, `runs` and the evaluators build it once from the config (`DataSpec.from_config`)
and hand it down: `data.sources` and `input_pipeline` take it, never the `ConfigDict`. Error
messages still name the config keys (`config.dataset_size`, `config.data_label`, ...), since
those are what a user sets.
"""

from __future__ import annotations

import dataclasses
import os

import ml_collections

__all__ = ["DataSpec", "default_data_dir", "resolve_data_dir"]


def default_data_dir() -> str:
    """Where prepared datasets and small cached weights live unless `config.data_dir` says."""
    return os.environ.get(
        "WGAN_JAX_DATA_DIR", os.path.join(os.path.expanduser("~"), ".cache", "wgan_jax", "data")
    )


def resolve_data_dir(data_dir: str) -> str:
    """`data_dir` (`config.data_dir`, `~` expanded), or the default when it is ""
    (`$WGAN_JAX_DATA_DIR` or ~/.cache/wgan_jax/data)."""
    return os.path.expanduser(data_dir) if data_dir else default_data_dir()


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """The data a run trains on and how it is batched.

    `dataset` is a config name (`toy:NAME`, `digits`, `stacked_digits`, `tfds:NAME`,
    `folder:/path`); `data_dir` is already resolved (`resolve_data_dir`). `declared_classes`
    is `config.model.num_classes` (0: read the count from the data, see
    `sources.num_classes`); `conditional` whether the model is class-conditional.
    `global_batch_size`, `n_critic` and `seed` fix what every global batch holds.
    """

    dataset: str
    data_dir: str
    image_size: int = 32
    num_channels: int = 1
    data_split: str = "train"
    data_label: str = "label"
    folder_classes: bool = False
    skip_corrupt_images: bool = False
    dataset_size: int = 0
    conditional: bool = False
    declared_classes: int = 0
    global_batch_size: int = 256
    n_critic: int = 5
    seed: int = 0

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> DataSpec:
        """The data settings of a run's config (its data directory resolved now)."""
        return cls(
            dataset=config.dataset, data_dir=resolve_data_dir(config.data_dir),
            image_size=config.image_size, num_channels=config.num_channels,
            data_split=config.data_split, data_label=config.data_label,
            folder_classes=config.folder_classes,
            skip_corrupt_images=config.skip_corrupt_images,
            dataset_size=config.dataset_size,
            conditional=config.model.conditional != "none",
            declared_classes=config.model.num_classes,
            global_batch_size=config.global_batch_size, n_critic=config.n_critic,
            seed=config.seed,
        )

    @property
    def kind(self) -> str:
        """The dataset's kind: "toy", "digits", "stacked_digits", "tfds" or "folder"."""
        return self.dataset.partition(":")[0]

    @property
    def name(self) -> str:
        """What follows the kind: the toy mixture, tfds name or folder path ("" for digits)."""
        return self.dataset.partition(":")[2]

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one example: (2,) for toy data, (H, W, C) for images (as
        `config.data_shape`)."""
        if self.dataset.startswith("toy:"):
            return (2,)
        return (self.image_size, self.image_size, self.num_channels)
