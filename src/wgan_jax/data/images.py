"""Image sources with random access, and the pure per-image preprocessing they share.

A source is anything with `__len__` and `__getitem__(i) -> uint8 [S, S, C]` already at the
configured size and channel count (`ArraySource`, the folder and TFDS sources). The input
pipeline shuffles, slices and batches *indices*, so a source never needs to know about
epochs, processes or devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from PIL import Image

from wgan_jax.errors import DataError

__all__ = ["ImageSource", "ArraySource", "MappedSource", "SubsetSource", "to_float",
           "prepare_image", "prepare_array"]

_MODE_OF_CHANNELS = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_HIGH_DEPTH_MODES = ("I", "F", "I;16", "I;16B", "I;16L", "I;16N")


class ImageSource(Protocol):
    """Random access to uint8 images `[S, S, C]`; optional integer labels."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> np.ndarray: ...


class ArraySource:
    """An in-memory source: uint8 images `[N, S, S, C]` and optional labels `[N, ...]`."""

    def __init__(self, images: np.ndarray, labels: np.ndarray | None = None) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.images[index]


class MappedSource:
    """`fn(parent[i])` on access, e.g. decoding a stored record into an image."""

    def __init__(self, parent: Any, fn: Callable[[Any], np.ndarray], labels: Any = None) -> None:
        self.parent = parent
        self.fn = fn
        self.labels = labels

    def __len__(self) -> int:
        return len(self.parent)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.fn(self.parent[index])


SUBSET_SEED = 20_160_616  # the one fixed permutation `dataset_size` takes its examples from


class SubsetSource:
    """The first `size` examples of `parent` in a fixed permutation (`config.dataset_size`).

    The permutation does not depend on the run's seed, so runs with different seeds train on the
    same examples, and a smaller subset is part of every larger one.
    """

    def __init__(self, parent: Any, size: int) -> None:
        if size > len(parent):
            raise DataError(
                f"config.dataset_size: {size} is more than the {len(parent)} examples of the data"
            )
        self.parent = parent
        self.indices = np.random.default_rng(SUBSET_SEED).permutation(len(parent))[:size]
        labels = getattr(parent, "labels", None)
        self.labels = None if labels is None else np.asarray(labels)[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.parent[int(self.indices[index])]


def to_float(images: np.ndarray) -> np.ndarray:
    """uint8 pixels -> float32 in [-1, 1] (0 -> -1, 255 -> 1)."""
    return images.astype(np.float32) * np.float32(1.0 / 127.5) - np.float32(1.0)


def _center_crop_resize(img: Image.Image, size: int) -> Image.Image:
    """Crops the central square, then resizes it to `size` (antialiased bilinear; Pillow
    premultiplies alpha for LA/RGBA, so transparent pixels do not bleed colour)."""
    w, h = img.size
    side = min(w, h)
    if (w, h) != (side, side):
        left, top = (w - side) // 2, (h - side) // 2
        img = img.crop((left, top, left + side, top + side))
    if side != size:
        img = img.resize((size, size), Image.Resampling.BILINEAR)
    return img


def _normalise_mode(img: Image.Image, what: str) -> Image.Image:
    """Any 8-bit PIL mode -> L, LA, RGB or RGBA (keeping alpha where there is one)."""
    if img.mode in _HIGH_DEPTH_MODES:
        raise DataError(f"{what}: PIL mode {img.mode!r} (16-bit or float pixels) is not supported")
    if img.mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if img.mode == "1":
        return img.convert("L")
    if img.mode == "PA" or (img.mode == "P" and "transparency" in img.info):
        return img.convert("RGBA")
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as error:
        raise DataError(f"{what}: cannot convert PIL mode {img.mode!r} to RGB: {error}") from None


def _to_channels(img: Image.Image, channels: int) -> Image.Image:
    """L/LA/RGB/RGBA -> the mode of `channels`; alpha is composited over black when dropped."""
    target = _MODE_OF_CHANNELS[channels]
    if img.mode == target:
        return img
    if img.mode in ("LA", "RGBA") and target in ("L", "RGB"):
        rgba = img.convert("RGBA")
        black = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        img = Image.alpha_composite(black, rgba).convert("RGB")
    return img.convert(target)


def prepare_image(img: Image.Image, size: int, channels: int, what: str) -> np.ndarray:
    """A decoded image -> uint8 `[size, size, channels]` (centre crop, resize, channels).

    `what` names the image (a file or dataset) in error messages.
    """
    img = _normalise_mode(img, what)
    img = _center_crop_resize(img, size)
    out = np.asarray(_to_channels(img, channels), dtype=np.uint8)
    return out.reshape(size, size, channels)


def prepare_array(image: np.ndarray, size: int, channels: int, what: str) -> np.ndarray:
    """A uint8 `[H, W]` or `[H, W, C]` array (C in 1..4) -> uint8 `[size, size, channels]`."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise DataError(f"{what}: images are {image.dtype}, only uint8 images are supported")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.ndim == 2:
        mode = "L"
    elif image.ndim == 3 and image.shape[-1] in (2, 3, 4):
        mode = _MODE_OF_CHANNELS[image.shape[-1]]
    else:
        raise DataError(
            f"{what}: images of shape {image.shape} cannot be converted to {channels} channels"
        )
    if image.shape[:2] == (size, size):
        if image.ndim == 2 and channels == 1:
            return image[..., None]
        if image.ndim == 3 and image.shape[-1] == channels:
            return image
    return prepare_image(Image.fromarray(image, mode=mode), size, channels, what)
