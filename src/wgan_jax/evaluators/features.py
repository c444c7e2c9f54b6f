"""Feature metrics: FID, KID, precision, recall, density, coverage (and the Inception Score).

Computed in a `FeatureSpace` (a feature function over images in [-1, 1], e.g. the digit
classifier's hidden layer or Inception pool3) against the features of real reference images,
on at most `FEATURE_CAP` samples; the keys name the space: `eval/fid_digits`,
`eval/kid_inception`, ...
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgan_jax.eval_plan import FEATURE_METRICS
from wgan_jax.evaluators.base import FeatureFn, LabelsFn, ReferenceFn, Samples
from wgan_jax.metrics import compare_features, inception_score

__all__ = ["FeatureSpace", "FeatureEvaluator", "InceptionEvaluator", "FEATURE_CAP"]

FEATURE_CAP = 10_000  #: samples in the feature metrics (PRDC is O(n^2) in memory traffic)


class FeatureSpace:
    """A named feature function and the features of up to `num_reference` distinct real
    images in it (`reference_fn(num_reference, seed)`), computed once; `reference_labels` of
    those images when `labels_fn` gives the labels of `reference_fn`'s examples."""

    def __init__(self, name: str, fn: FeatureFn, reference_fn: ReferenceFn, *,
                 num_reference: int, seed: int = 0, labels_fn: LabelsFn | None = None) -> None:
        self.name, self.num_reference, self.seed = name, num_reference, seed
        self._fn, self._reference_fn, self._labels_fn = fn, reference_fn, labels_fn
        self._reference: np.ndarray | None = None
        self._distinct: np.ndarray | None = None  # indices of the distinct reference images
        self._labels: np.ndarray | None = None

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """The `[N, D]` features of images (clipped to [-1, 1])."""
        return self._fn(np.clip(np.asarray(images, np.float32), -1.0, 1.0))

    @property
    def has_labels(self) -> bool:
        """Whether the reference examples come with class labels."""
        return self._labels_fn is not None

    def reference(self) -> np.ndarray:
        """The real examples' features, computed on first use."""
        if self._reference is None:
            real = np.asarray(self._reference_fn(self.num_reference, self.seed), np.float32)
            # Small datasets (digits: 1797 images) are sampled with replacement; duplicates
            # would shrink the k-NN radii of precision/recall, so they are dropped.
            _, self._distinct = np.unique(real.reshape(len(real), -1), axis=0,
                                          return_index=True)
            self._reference = self(real[self._distinct])
        return self._reference

    def reference_labels(self) -> np.ndarray:
        """The real examples' class labels, in `reference()`'s order."""
        if self._labels is None:
            self.reference()
            labels = None if self._labels_fn is None else self._labels_fn(self.num_reference,
                                                                           self.seed)
            if labels is None:
                raise ValueError(f"the {self.name!r} feature space has no reference labels")
            self._labels = np.asarray(labels)[self._distinct]
        return self._labels


class FeatureEvaluator:
    """The feature metrics of the first `FEATURE_CAP` samples in `space`."""

    def __init__(self, space: FeatureSpace, *, kid_subsets: int = 100) -> None:
        self.space, self.kid_subsets = space, kid_subsets

    def __call__(self, samples: Samples) -> dict[str, float]:
        return self.compare(samples.features(self.space, FEATURE_CAP))

    def compare(self, fake: np.ndarray) -> dict[str, float]:
        """The metrics of fake features `[N, D]` against the reference's."""
        m = compare_features(self.space.reference(), fake, kid_subsets=self.kid_subsets,
                             seed=self.space.seed)
        m["kid"] = m["kid_mean"]
        return {f"eval/{k}_{self.space.name}": float(m[k]) for k in FEATURE_METRICS}


class InceptionEvaluator(FeatureEvaluator):
    """The feature metrics on Inception pool3 features and the Inception Score (`eval/is`),
    from one pass of `extractor.features_and_probs` over the RGB channels."""

    def __init__(self, space: FeatureSpace, extractor: Any, *, kid_subsets: int = 100) -> None:
        super().__init__(space, kid_subsets=kid_subsets)
        self.extractor = extractor

    def __call__(self, samples: Samples) -> dict[str, float]:
        fake, probs = self.extractor.features_and_probs(samples.images[:FEATURE_CAP][..., :3])
        return {**self.compare(fake),
                "eval/is": inception_score(probs, splits=min(10, len(probs)))[0]}
