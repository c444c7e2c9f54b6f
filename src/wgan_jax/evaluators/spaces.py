"""The feature functions images are compared with: the digit classifier's hidden features and
Inception pool3 features (the feature spaces "digits" and "inception", `FeatureSpace`).

Digit images are read on the channel that carries the digit (`digit_ink`); stacked digits on
each channel, their features concatenated. Inception reads the RGB channels (an alpha channel
is dropped) with pytorch-fid weights (`load_inception`).
"""

from __future__ import annotations

import os

import numpy as np

from wgan_jax.errors import UserError
from wgan_jax.evaluators.base import FeatureFn
from wgan_jax.metrics.digits_classifier import DigitClassifier
from wgan_jax.metrics.inception import InceptionExtractor

__all__ = ["digit_features", "digit_ink", "inception_features", "load_inception"]


def digit_ink(images: np.ndarray) -> np.ndarray:
    """The one channel of `[N, H, W, C]` `digits` images that carries the digit, `[N, H, W, 1]`:
    grey as is, the mean of R, G and B (all equal to the grey digit in real RGB digits), the
    alpha channel of RGBA sprites (the ink; their colour only names the class)."""
    channels = images.shape[-1]
    if channels == 1:
        return images
    if channels == 3:
        return images.mean(axis=-1, keepdims=True)
    if channels == 4:
        return images[..., 3:4]
    raise ValueError(f"digit images have 1, 3 or 4 channels, got shape {images.shape}")


def digit_features(classifier: DigitClassifier, *, per_channel: bool = False) -> FeatureFn:
    """The classifier's hidden features of the ink channel, or (`per_channel`, stacked
    digits) of each channel, concatenated."""
    if not per_channel:
        return lambda images: classifier.features(digit_ink(images))

    def features(images: np.ndarray) -> np.ndarray:
        n, h, w, c = images.shape
        channels = np.moveaxis(images, -1, 1).reshape(n * c, h, w, 1)
        return classifier.features(channels).reshape(n, -1)

    return features


def inception_features(extractor: InceptionExtractor) -> FeatureFn:
    """Inception pool3 features of the RGB channels."""
    return lambda images: extractor.features(images[..., :3])


def load_inception(path: str) -> InceptionExtractor:
    """The FID Inception network from pytorch-fid weights (.pth or .npz) at `path`;
    `UserError` naming `config.eval.inception_weights` when there is none or it cannot load."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise UserError(f"config.eval.inception_weights: no file {path!r}")
    try:
        return InceptionExtractor.from_pytorch_fid_weights(path)
    except (ImportError, ValueError, OSError, KeyError) as error:
        first = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"config.eval.inception_weights: cannot load {path!r}: {first}") from None

