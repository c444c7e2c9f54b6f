"""Exact Wasserstein-1 distance between two equal-size empirical samples."""

from __future__ import annotations

import numpy as np

__all__ = ["wasserstein1_exact"]


def wasserstein1_exact(x: np.ndarray, y: np.ndarray) -> float:
    """Mean Euclidean distance of the optimal one-to-one matching of ``x`` [n, d] and ``y`` [n, d].

    For uniform weights on equal-size samples the optimal transport plan is a permutation, so the
    assignment problem gives W1 exactly. Costs O(n^3) time: keep n in the low thousands.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x {x.shape} and y {y.shape} must be [n, d] with equal d")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"exact W1 needs equal sample sizes, got {x.shape[0]} and {y.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("samples are empty")
    import scipy.optimize  # here: 0.25 s to import, and most processes never call this
    import scipy.spatial.distance

    cost = scipy.spatial.distance.cdist(x, y, metric="euclidean")
    rows, cols = scipy.optimize.linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())
