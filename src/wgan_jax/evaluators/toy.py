"""2-D toy data: the mode metrics of a Gaussian mixture and the exact Wasserstein-1 distance.

`ModeEvaluator`: modes, high_quality and reverse_kl of a named mixture (the VEEGAN / PacGAN
protocol); `W1Evaluator`: w1 against as many real samples (at most `W1_CAP`: the assignment
costs O(n^3)), for any 2-D data (a swiss roll gets this one only).
"""

from __future__ import annotations

import numpy as np

from wgan_jax.evaluators.base import ReferenceFn, Samples
from wgan_jax.metrics import toy_mixture, toy_mode_metrics, wasserstein1_exact

__all__ = ["ModeEvaluator", "W1Evaluator", "W1_CAP"]

W1_CAP = 2500  #: samples in the exact W1 (Hungarian assignment, O(n^3))


class ModeEvaluator:
    """`eval/modes`, `eval/high_quality`, `eval/reverse_kl` of samples of mixture `name`."""

    def __init__(self, name: str) -> None:
        self.centres, self.std = toy_mixture(name)

    def __call__(self, samples: Samples) -> dict[str, float]:
        metrics = toy_mode_metrics(samples.points, self.centres, self.std)
        return {f"eval/{k}": float(v) for k, v in metrics.items()}


class W1Evaluator:
    """`eval/w1`: the exact W1 distance between the first `W1_CAP` samples and as many real
    ones, drawn with `seed` (the same real samples at every evaluation)."""

    def __init__(self, reference_fn: ReferenceFn, seed: int = 0) -> None:
        self._reference_fn, self.seed = reference_fn, seed
        self._reference: dict[int, np.ndarray] = {}

    def reference(self, n: int) -> np.ndarray:
        """`n` real examples (float64), drawn once per `n`."""
        if n not in self._reference:
            self._reference[n] = np.asarray(self._reference_fn(n, self.seed), np.float64)
        return self._reference[n]

    def __call__(self, samples: Samples) -> dict[str, float]:
        points = samples.points
        n = min(len(points), W1_CAP)
        return {"eval/w1": wasserstein1_exact(points[:n], self.reference(n))}
