"""Frechet Inception Distance between two feature sets (pytorch-fid's formula)."""

from __future__ import annotations

import numpy as np

__all__ = ["feature_stats", "fid_from_stats", "fid_from_features"]


def feature_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance (``np.cov(rowvar=False)``) of ``[N, D]`` features, in float64."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"features must have shape [N>=2, D], got {features.shape}")
    return features.mean(axis=0), np.atleast_2d(np.cov(features, rowvar=False))


def _sqrtm(a: np.ndarray) -> np.ndarray:
    """Matrix square root; non-finite entries signal failure to the caller."""
    import scipy.linalg  # here: 0.1 s to import, and a process that never scores needs none

    with np.errstate(all="ignore"):
        return scipy.linalg.sqrtm(a)


def fid_from_stats(
    mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray, eps: float = 1e-6
) -> float:
    """Frechet distance between N(mu1, sigma1) and N(mu2, sigma2).

    d^2 = ||mu1 - mu2||^2 + Tr(S1) + Tr(S2) - 2 Tr(sqrtm(S1 S2)). If the product's square root is
    not finite, ``eps * I`` is added to both covariances (as pytorch-fid does); a complex root whose
    diagonal imaginary part exceeds 1e-3 raises ValueError, otherwise its real part is used.
    """
    mu1 = np.atleast_1d(np.asarray(mu1, dtype=np.float64))
    mu2 = np.atleast_1d(np.asarray(mu2, dtype=np.float64))
    sigma1 = np.atleast_2d(np.asarray(sigma1, dtype=np.float64))
    sigma2 = np.atleast_2d(np.asarray(sigma2, dtype=np.float64))
    if mu1.shape != mu2.shape:
        raise ValueError(f"mean vectors differ in shape: {mu1.shape} vs {mu2.shape}")
    if sigma1.shape != sigma2.shape or sigma1.shape != (mu1.shape[0],) * 2:
        raise ValueError(f"covariances must be [D, D] with D={mu1.shape[0]}")
    diff = mu1 - mu2
    covmean = _sqrtm(sigma1 @ sigma2)
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = _sqrtm((sigma1 + offset) @ (sigma2 + offset))
    if np.iscomplexobj(covmean):
        max_imag = np.max(np.abs(np.diagonal(covmean).imag))
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise ValueError(f"sqrtm has a significant imaginary component {max_imag:.3g}")
        covmean = covmean.real
    value = diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * np.trace(covmean)
    return float(value)


def fid_from_features(real: np.ndarray, fake: np.ndarray, eps: float = 1e-6) -> float:
    """FID between two ``[N, D]`` feature arrays (sample counts may differ)."""
    mu1, s1 = feature_stats(real)
    mu2, s2 = feature_stats(fake)
    return fid_from_stats(mu1, s1, mu2, s2, eps=eps)
