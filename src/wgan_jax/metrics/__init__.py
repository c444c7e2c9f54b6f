"""Evaluation metrics: FID, KID, IS, precision/recall, density/coverage, toy modes, exact W1.

Pure numpy/scipy functions of features, probabilities or samples; feature extractors (the
digit classifier, the FID Inception network) live in their own modules and are imported from
there so that importing this package stays cheap.
"""

from wgan_jax.metrics.feature_metrics import compare_features
from wgan_jax.metrics.fid import feature_stats, fid_from_features, fid_from_stats
from wgan_jax.metrics.inception_score import inception_score
from wgan_jax.metrics.kid import kid_from_features, mmd2_unbiased
from wgan_jax.metrics.prdc import compute_prdc, density_coverage, precision_recall
from wgan_jax.metrics.stacked import stacked_mode_metrics
from wgan_jax.metrics.toy import TOY_MIXTURES, toy_mixture, toy_mode_metrics
from wgan_jax.metrics.wasserstein import wasserstein1_exact

__all__ = [
    "TOY_MIXTURES",
    "compare_features",
    "compute_prdc",
    "density_coverage",
    "feature_stats",
    "fid_from_features",
    "fid_from_stats",
    "inception_score",
    "kid_from_features",
    "mmd2_unbiased",
    "precision_recall",
    "stacked_mode_metrics",
    "toy_mixture",
    "toy_mode_metrics",
    "wasserstein1_exact",
]
