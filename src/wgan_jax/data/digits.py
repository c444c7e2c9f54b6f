"""Offline image datasets from scikit-learn's shipped 8x8 digits (1797 images, no download).

* ``digits``: every digit, bilinearly upscaled to the configured size (grey; repeated into RGB
  for 3 channels; with 4 channels an RGBA *sprite*: a colour per class, the digit's ink as
  alpha, transparent background, like the 64x64 RGBA sprites users bring).
* ``stacked_digits``: the offline analogue of Stacked MNIST: a fixed, seeded table of
  `STACKED_SIZE` triples of independent digits, one per RGB channel, so 10^3 = 1000 modes. The
  images are composed on access; `stacked_digits_labels()` gives the `[N, 3]` class triples
  for mode-coverage metrics, and `stacked_digits_classes()` turns triples into the single
  class `100 * R + 10 * G + B` (0..999) that conditional models are trained on.
"""

from __future__ import annotations

import functools

import numpy as np

from wgan_jax.data.images import ArraySource

__all__ = ["digits_images", "digits_source", "stacked_digits_source", "StackedDigitsSource",
           "stacked_digits_classes"]

STACKED_SIZE = 50_000
STACKED_SEED = 20170531  # fixed: the dataset is the same for every training seed
_DIGIT_MAX = 16.0  # sklearn digits are integers 0..16


def bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """`[size_out, size_in]` bilinear interpolation weights (half-pixel centres, edges clamped),
    the same sampling as PIL / `jax.image.resize` use when upscaling."""
    src = (np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5
    src = np.clip(src, 0.0, size_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = src - lo
    m = np.zeros((size_out, size_in))
    np.add.at(m, (np.arange(size_out), lo), 1.0 - frac)
    np.add.at(m, (np.arange(size_out), hi), frac)
    return m


@functools.lru_cache(maxsize=4)
def digits_images(size: int) -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits as uint8 `[N, size, size]` (0 = background) and their int64 labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    m = bilinear_matrix(8, size)
    n = len(data.images)
    cols = (data.images.astype(np.float64).reshape(n * 8, 8) @ m.T).reshape(n, 8, size)
    big = (cols.transpose(0, 2, 1).reshape(n * size, 8) @ m.T).reshape(n, size, size)
    big = big.transpose(0, 2, 1)  # [n, rows, cols]
    pixels = np.clip(np.rint(big * (255.0 / _DIGIT_MAX)), 0, 255).astype(np.uint8)
    pixels.setflags(write=False)
    return pixels, data.target.astype(np.int64)


_SPRITE_COLOURS = np.array(
    [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
     (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)],
    dtype=np.uint8,
)


def _with_channels(grey: np.ndarray, channels: int, labels: np.ndarray) -> np.ndarray:
    if channels == 1:
        return grey[..., None]
    if channels == 3:
        return np.repeat(grey[..., None], 3, axis=-1)
    rgb = np.broadcast_to(_SPRITE_COLOURS[labels][:, None, None, :], (*grey.shape, 3))
    return np.concatenate([rgb, grey[..., None]], axis=-1)


def digits_source(size: int, channels: int = 1) -> ArraySource:
    """The ``digits`` dataset at `size` px with `channels` channels (labels attached)."""
    grey, labels = digits_images(size)
    return ArraySource(_with_channels(grey, channels, labels), labels)


@functools.lru_cache(maxsize=1)
def stacked_digits_triples() -> np.ndarray:
    """The fixed `[STACKED_SIZE, 3]` table of digit indices (R, G, B)."""
    rng = np.random.default_rng(STACKED_SEED)
    return rng.integers(0, 1797, size=(STACKED_SIZE, 3))


def stacked_digits_labels() -> np.ndarray:
    """`[STACKED_SIZE, 3]` class labels (digit of the R, G and B channel) of each example."""
    _, labels = digits_images(8)
    return labels[stacked_digits_triples()]


STACKED_CLASSES = 1000


def stacked_digits_classes(triples: np.ndarray) -> np.ndarray:
    """`[..., 3]` digit triples (R, G, B) -> the int64 classes `100 * R + 10 * G + B`, `[...]`.

    The one convention for a stacked digit's class: conditional training and the evaluation of
    conditional runs both use it.
    """
    triples = np.asarray(triples, np.int64)
    return triples[..., 0] * 100 + triples[..., 1] * 10 + triples[..., 2]


class StackedDigitsSource:
    """Example i = the three digits of triple i stacked as RGB; uint8 `[size, size, 3]`."""

    def __init__(self, size: int) -> None:
        self.grey, _ = digits_images(size)
        self.triples = stacked_digits_triples()
        self.labels = stacked_digits_labels()

    def __len__(self) -> int:
        return len(self.triples)

    def __getitem__(self, index: int) -> np.ndarray:
        return np.stack([self.grey[j] for j in self.triples[index]], axis=-1)


def stacked_digits_source(size: int) -> StackedDigitsSource:
    """The ``stacked_digits`` dataset at `size` px (3 channels, 1000 modes)."""
    return StackedDigitsSource(size)
