"""A small 8x8 digit classifier (scikit-learn's ``load_digits``) used as a feature extractor.

It scores generated 'digits' / 'stacked_digits' images: class probabilities for the
stacked-digits mode count and hidden activations as features for FID/KID/PR/DC. The weights are
trained once, offline, on a seeded 1500/297 split and cached as a plain ``.npz`` under the data
directory; nothing is downloaded.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np

from wgan_jax import fs

__all__ = ["DigitClassifier", "load_digits_scaled", "to_8x8", "train_test_split_indices"]

CACHE_NAME = "digits_classifier_v1.npz"
NUM_TRAIN = 1500
SPLIT_SEED = 0
_HIDDEN = 64


def area_matrix(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]`` area-averaging weights: each output cell averages the input span it
    covers, with fractional overlaps weighted by length (exact block means when sizes divide)."""
    edges_out = np.linspace(0.0, size_in, size_out + 1)
    lo = np.arange(size_in)[None, :]
    overlap = np.clip(
        np.minimum(edges_out[1:, None], lo + 1) - np.maximum(edges_out[:-1, None], lo), 0.0, None
    )
    return overlap / overlap.sum(axis=1, keepdims=True)


def to_8x8(images: np.ndarray) -> np.ndarray:
    """``[N, H, W, 1]`` (or ``[N, H, W]``) images -> ``[N, 64]`` 8x8 area averages, same range."""
    images = np.asarray(images, dtype=np.float64)
    if images.ndim == 4:
        if images.shape[-1] != 1:
            raise ValueError(f"expected one channel, got images of shape {images.shape}")
        images = images[..., 0]
    if images.ndim != 3:
        raise ValueError(f"images must be [N, H, W, 1], got {images.shape}")
    rows = area_matrix(images.shape[1], 8)
    cols = area_matrix(images.shape[2], 8)
    small = np.einsum("ih,nhw,jw->nij", rows, images, cols)
    return small.reshape(small.shape[0], 64)


def load_digits_scaled() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 sklearn digits as ``[N, 8, 8, 1]`` in [-1, 1] (pixel / 8 - 1) and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = data.images.astype(np.float64) / 8.0 - 1.0
    return images[..., None], data.target.astype(np.int64)


def train_test_split_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixed seeded split: first ``NUM_TRAIN`` of a seed-0 permutation train, the rest test."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    return perm[:NUM_TRAIN], perm[NUM_TRAIN:]


@dataclass(frozen=True)
class DigitClassifier:
    """One-hidden-layer ReLU MLP on 8x8 inputs in [-1, 1]; pure numpy inference."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    test_accuracy: float

    @classmethod
    def train(cls, seed: int = 0) -> DigitClassifier:
        """Fit on the fixed train split (seconds on one core); measure held-out accuracy."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        images, labels = load_digits_scaled()
        x = to_8x8(images)
        train_idx, test_idx = train_test_split_indices(len(labels))
        mlp = MLPClassifier(
            hidden_layer_sizes=(_HIDDEN,),
            alpha=1e-3,
            batch_size=100,
            max_iter=50,
            random_state=seed,
        )
        with warnings.catch_warnings():
            # A fixed, short epoch budget is deliberate: it reaches ~98% held-out accuracy.
            warnings.simplefilter("ignore", ConvergenceWarning)
            mlp.fit(x[train_idx], labels[train_idx])
        w1, w2 = mlp.coefs_
        b1, b2 = mlp.intercepts_
        model = cls(w1, b1, w2, b2, test_accuracy=0.0)
        accuracy = float((model.predict(images[test_idx]) == labels[test_idx]).mean())
        return cls(w1, b1, w2, b2, test_accuracy=accuracy)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DigitClassifier:
        """Read weights written by ``save``."""
        with np.load(path) as f:
            return cls(f["w1"], f["b1"], f["w2"], f["b2"], float(f["test_accuracy"]))

    def save(self, path: str | os.PathLike) -> None:
        """Write the weights atomically as a plain ``.npz`` (no pickle)."""
        buffer = io.BytesIO()
        np.savez(
            buffer,
            w1=self.w1,
            b1=self.b1,
            w2=self.w2,
            b2=self.b2,
            test_accuracy=np.float64(self.test_accuracy),
        )
        fs.write_atomic(os.fspath(path), buffer.getvalue())

    @classmethod
    def load_or_train(cls, data_dir: str | os.PathLike) -> DigitClassifier:
        """Load ``data_dir/digits_classifier_v1.npz``, training and caching it first if absent."""
        path = os.path.join(os.fspath(data_dir), CACHE_NAME)
        if os.path.exists(path):
            return cls.load(path)
        model = cls.train()
        model.save(path)
        return model

    def features(self, images: np.ndarray) -> np.ndarray:
        """Hidden-layer activations ``[N, 64]`` of ``[N, H, W, 1]`` images in [-1, 1]."""
        return np.maximum(to_8x8(images) @ self.w1 + self.b1, 0.0)

    def logits(self, images: np.ndarray) -> np.ndarray:
        """Class logits ``[N, 10]``."""
        return self.logits_from_features(self.features(images))

    def logits_from_features(self, features: np.ndarray) -> np.ndarray:
        """Class logits ``[N, 10]`` of hidden features ``[N, 64]`` (from ``features``)."""
        return features @ self.w2 + self.b2

    def predict_proba(self, images: np.ndarray) -> np.ndarray:
        """Class probabilities ``[N, 10]`` (softmax of the logits)."""
        z = self.logits(images)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Predicted class ``[N]``."""
        return self.logits(images).argmax(axis=1)

    def predict_channels(self, images: np.ndarray) -> np.ndarray:
        """Per-channel classes ``[N, C]`` of ``[N, H, W, C]`` stacked-digit images."""
        images = np.asarray(images)
        if images.ndim != 4:
            raise ValueError(f"images must be [N, H, W, C], got {images.shape}")
        n, h, w, c = images.shape
        per_channel = np.moveaxis(images, -1, 1).reshape(n * c, h, w, 1)
        return self.predict(per_channel).reshape(n, c)
