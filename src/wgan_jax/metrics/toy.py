"""Mode statistics for 2-D Gaussian mixtures (VEEGAN / PacGAN protocol) and their definitions."""

from __future__ import annotations

import math

import numpy as np

TOY_MIXTURES = ("ring8", "grid25", "8gaussians", "25gaussians")


def toy_mixture(name: str) -> tuple[np.ndarray, float]:
    """Mode centres ``[K, 2]`` and per-coordinate std of a named mixture.

    ring8: 8 modes at angle 2*pi*k/8 on the unit circle, std 0.01. grid25: {-4,-2,0,2,4}^2,
    std 0.05. 8gaussians / 25gaussians: the WGAN-GP reference toy data after its final rescaling
    (8gaussians: scale-2 unit-circle compass points with std 0.02, all divided by 1.414;
    25gaussians: {-4,-2,0,2,4}^2 with std 0.05, all divided by 2.828).
    """
    if name == "ring8":
        angles = 2.0 * np.pi * np.arange(8) / 8
        return np.stack([np.cos(angles), np.sin(angles)], axis=1), 0.01
    if name == "grid25":
        return _grid(2.0), 0.05
    if name == "8gaussians":
        s = 1.0 / math.sqrt(2.0)
        unit = np.array(
            [[1, 0], [-1, 0], [0, 1], [0, -1], [s, s], [s, -s], [-s, s], [-s, -s]], dtype=np.float64
        )
        return 2.0 * unit / 1.414, 0.02 / 1.414
    if name == "25gaussians":
        return _grid(2.0) / 2.828, 0.05 / 2.828
    raise ValueError(f"unknown toy mixture {name!r}; expected one of {TOY_MIXTURES}")


def _grid(spacing: float) -> np.ndarray:
    ticks = spacing * np.arange(-2, 3, dtype=np.float64)
    xx, yy = np.meshgrid(ticks, ticks, indexing="ij")
    return np.stack([xx.ravel(), yy.ravel()], axis=1)


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
