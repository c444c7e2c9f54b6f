"""Inception score from class probabilities."""

from __future__ import annotations

import numpy as np

__all__ = ["inception_score"]


def inception_score(probs: np.ndarray, splits: int = 10) -> tuple[float, float]:
    """exp(E_x KL(p(y|x) || p(y))) computed on ``splits`` consecutive chunks; (mean, std).

    ``probs`` is ``[N, C]`` with rows summing to one; 0 * log 0 counts as 0.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise ValueError(f"probs must be [N, C], got {probs.shape}")
    if not 1 <= splits <= probs.shape[0]:
        raise ValueError(f"splits must be in [1, N={probs.shape[0]}], got {splits}")
    scores = []
    for part in np.array_split(probs, splits):
        marginal = part.mean(axis=0, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(part > 0, part * (np.log(part) - np.log(marginal)), 0.0)
        scores.append(np.exp(terms.sum(axis=1).mean()))
    return float(np.mean(scores)), float(np.std(scores))
