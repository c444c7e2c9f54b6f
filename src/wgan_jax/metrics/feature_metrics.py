"""All feature-space sample-quality metrics of a real/fake pair in one call."""

from __future__ import annotations

import numpy as np

from wgan_jax.metrics.fid import fid_from_features
from wgan_jax.metrics.kid import kid_from_features
from wgan_jax.metrics.prdc import compute_prdc

__all__ = ["compare_features"]


def compare_features(
    real: np.ndarray,
    fake: np.ndarray,
    *,
    kid_subsets: int = 100,
    kid_subset_size: int = 1000,
    k_pr: int = 3,
    k_dc: int = 5,
    seed: int = 0,
) -> dict[str, float]:
    """FID, KID (mean, std), precision, recall, density and coverage of ``[N, D]`` features.

    Keys: fid, kid_mean, kid_std, precision, recall, density, coverage.
    """
    kid_mean, kid_std = kid_from_features(
        real, fake, subsets=kid_subsets, subset_size=kid_subset_size, seed=seed
    )
    out = {"fid": fid_from_features(real, fake), "kid_mean": kid_mean, "kid_std": kid_std}
    out.update(compute_prdc(real, fake, k_pr=k_pr, k_dc=k_dc))
    return out
