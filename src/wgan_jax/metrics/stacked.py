"""Mode count and KL to uniform for stacked-digit samples (Stacked MNIST protocol)."""

from __future__ import annotations

import numpy as np

__all__ = ["stacked_mode_metrics"]


def stacked_mode_metrics(labels: np.ndarray, num_classes: int = 10) -> dict[str, float | int]:
    """Modes covered and KL(q || uniform) of the joint per-channel label histogram.

    ``labels`` is ``[N, C]`` integer class predictions (one per channel) or ``[N, C, num_classes]``
    probabilities (argmax is taken). The mode of a sample is its label tuple, one of
    ``num_classes ** C`` (1000 for three channels); 0 log 0 = 0 for empty modes.
    """
    labels = np.asarray(labels)
    if labels.ndim == 3:
        labels = labels.argmax(axis=-1)
    if labels.ndim != 2 or labels.shape[0] == 0:
        raise ValueError(f"labels must be [N, C] (or [N, C, classes]), got {labels.shape}")
    labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes})")
    num_modes = num_classes ** labels.shape[1]
    weights = num_classes ** np.arange(labels.shape[1] - 1, -1, -1)
    counts = np.bincount(labels @ weights, minlength=num_modes)
    q = counts[counts > 0] / labels.shape[0]
    return {
        "modes": int((counts > 0).sum()),
        "num_modes": int(num_modes),
        "kl": float(np.sum(q * np.log(q * num_modes))),
    }
