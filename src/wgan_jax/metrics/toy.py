"""Mode statistics for 2-D Gaussian mixtures (VEEGAN / PacGAN protocol) and their definitions."""

from __future__ import annotations

import math

import numpy as np

from wgan_jax.data.toy import MIXTURES

__all__ = ["toy_mixture", "toy_mode_metrics", "TOY_MIXTURES"]

#: The toy datasets with modes (`wgan_jax.data.toy.MIXTURES`).
TOY_MIXTURES = tuple(MIXTURES)


def toy_mixture(name: str) -> tuple[np.ndarray, float]:
    """Mode centres ``[K, 2]`` and per-coordinate std of a named mixture (`data.toy.MIXTURES`)."""
    if name not in MIXTURES:
        raise ValueError(f"unknown toy mixture {name!r}; expected one of {TOY_MIXTURES}")
    centres, std = MIXTURES[name]
    return centres(), std


def toy_mode_metrics(
    samples: np.ndarray, centres: np.ndarray, std: float, threshold: float = 3.0
) -> dict[str, float | int]:
    """Captured modes, high-quality fraction and reverse KL of a 2-D sample set.

    A sample is high quality when its Euclidean distance to the nearest centre is at most
    ``threshold * std``; a mode is captured when it is the nearest centre of at least one
    high-quality sample. reverse_kl = KL(q || uniform) = sum_k q_k log(K q_k) where q is the
    histogram of high-quality samples over all K modes; empty modes contribute 0 (0 log 0 = 0),
    so a missing mode raises the KL through the larger mass of the others. With no high-quality
    sample at all, q is undefined and reverse_kl is set to log K, its value for total collapse.
    """
    samples = np.asarray(samples, dtype=np.float64)
    centres = np.asarray(centres, dtype=np.float64)
    if samples.ndim != 2 or centres.ndim != 2 or samples.shape[1] != centres.shape[1]:
        raise ValueError(f"samples {samples.shape}, centres {centres.shape}: need [N, D], [K, D]")
    if samples.shape[0] == 0:
        raise ValueError("samples is empty")
    num_modes = centres.shape[0]
    d2 = ((samples[:, None, :] - centres[None, :, :]) ** 2).sum(axis=-1)
    nearest = d2.argmin(axis=1)
    good = np.sqrt(d2[np.arange(samples.shape[0]), nearest]) <= threshold * std
    counts = np.bincount(nearest[good], minlength=num_modes)
    total = counts.sum()
    if total == 0:
        reverse_kl = math.log(num_modes)
    else:
        q = counts[counts > 0] / total
        reverse_kl = float(np.sum(q * np.log(q * num_modes)))
    return {
        "modes": int((counts > 0).sum()),
        "high_quality": float(good.mean()),
        "reverse_kl": float(reverse_kl),
    }
