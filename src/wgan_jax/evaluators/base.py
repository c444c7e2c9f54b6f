"""What every evaluator gets: one evaluation's generated samples, read once, shared by all.

An evaluator is any callable `evaluator(samples: Samples) -> {"eval/<metric>": value}`; the
composite (`composite.Evaluator`) makes one `Samples` per evaluation and merges the results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

__all__ = ["Samples", "FeatureSpaceLike", "ReferenceFn", "LabelsFn", "FeatureFn"]

ReferenceFn = Callable[[int, int], np.ndarray]  #: (n, seed) -> n real examples
LabelsFn = Callable[[int, int], "np.ndarray | None"]  #: the labels of ReferenceFn's examples
FeatureFn = Callable[[np.ndarray], np.ndarray]  #: images [N, H, W, C] in [-1, 1] -> [N, D]


class Samples:
    """Generated samples (toy `[N, 2]` or images NHWC) and the labels they were generated for.

    `points` are the samples as float64, `images` clipped to [-1, 1] as float32; `features`
    keeps the features of each feature space, so evaluators sharing a space compute them once.
    """

    def __init__(self, samples: np.ndarray, labels: np.ndarray | None = None) -> None:
        self.raw = np.asarray(samples)
        self.labels = None if labels is None else np.asarray(labels)
        self._points: np.ndarray | None = None
        self._images: np.ndarray | None = None
        self._features: dict[str, np.ndarray] = {}

    @property
    def points(self) -> np.ndarray:
        """The samples as float64 (toy metrics), converted once."""
        if self._points is None:
            self._points = self.raw.astype(np.float64)
        return self._points

    @property
    def images(self) -> np.ndarray:
        """The samples as float32 clipped to [-1, 1] (feature metrics), converted once."""
        if self._images is None:
            self._images = np.clip(self.raw.astype(np.float32), -1.0, 1.0)
        return self._images

    def features(self, space: FeatureSpaceLike, n: int | None = None) -> np.ndarray:
        """`space`'s features of the first `n` samples (None: all); features are per sample,
        so those already computed for at least `n` samples serve."""
        want = len(self.raw) if n is None else min(n, len(self.raw))
        have = self._features.get(space.name)
        if have is None or len(have) < want:
            have = self._features[space.name] = space(self.images[:want])
        return have[:want]


class FeatureSpaceLike(Protocol):
    """A named feature function (`features.FeatureSpace`)."""

    name: str

    def __call__(self, images: np.ndarray) -> np.ndarray: ...
