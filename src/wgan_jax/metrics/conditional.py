"""Metrics of class-conditional generators: labels for the samples, label accuracy, per-class FID.

Pure numpy. The classifier that reads the samples and the features FID compares are the
caller's (`wgan_jax.evaluators` uses the digit classifier for both).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wgan_jax.metrics.fid import fid_from_features

__all__ = ["label_accuracy", "per_class_fid", "class_counts", "draw_class_labels"]


def class_counts(frequencies: Sequence[float], n: int) -> np.ndarray:
    """How many of `n` samples each class gets: `n * frequency` rounded by largest remainder,
    so the counts sum to `n` exactly and follow the data's class frequencies as closely as
    integers can."""
    p = np.asarray(frequencies, np.float64)
    if p.ndim != 1 or len(p) == 0 or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"class frequencies must be non-negative and not all 0, got {p}")
    exact = n * p / p.sum()
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts


def draw_class_labels(frequencies: Sequence[float], n: int, seed: int) -> np.ndarray:
    """`n` int32 class labels in the proportions of `frequencies` (`class_counts`), in an order
    shuffled with `seed`: the same labels for the same seed, every evaluation of a run."""
    labels = np.repeat(np.arange(len(frequencies)), class_counts(frequencies, n))
    return np.random.default_rng(seed).permutation(labels).astype(np.int32)


def label_accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
    """The share of samples whose predicted class is the label they were generated for."""
    predicted, labels = np.asarray(predicted), np.asarray(labels)
    if predicted.shape != labels.shape or predicted.size == 0:
        raise ValueError(f"predicted {predicted.shape} and labels {labels.shape} must match")
    return float(np.mean(predicted == labels))


def per_class_fid(
    real: np.ndarray, real_labels: np.ndarray, fake: np.ndarray, fake_labels: np.ndarray,
    classes: Sequence[int],
) -> np.ndarray:
    """FID between the real and the fake `[N, D]` features of each class in `classes`.

    Raises `ValueError` naming the class when either side has fewer than 2 examples of it
    (a covariance needs 2; a class is never skipped quietly).
    """
    real_labels, fake_labels = np.asarray(real_labels), np.asarray(fake_labels)
    out = []
    for k in classes:
        r, f = real[real_labels == k], fake[fake_labels == k]
        if len(r) < 2 or len(f) < 2:
            raise ValueError(f"per-class FID of class {k}: {len(r)} real and {len(f)} generated "
                             "examples; needs at least 2 of each")
        out.append(fid_from_features(r, f))
    return np.asarray(out)
