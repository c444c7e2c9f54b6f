"""Stacked digits (Stacked MNIST protocol): which of the 1000 digit triples the samples cover.

Each channel's digit is read by the digit classifier; `eval/modes` counts the distinct
triples and `eval/kl` is KL(q || uniform) of their histogram.
"""

from __future__ import annotations

from typing import Any

from wgan_jax.evaluators.base import Samples
from wgan_jax.metrics import stacked_mode_metrics

__all__ = ["StackedDigitsEvaluator"]


class StackedDigitsEvaluator:
    """`eval/modes` (of 1000) and `eval/kl` of the per-channel digits `classifier` reads."""

    def __init__(self, classifier: Any) -> None:
        self.classifier = classifier

    def __call__(self, samples: Samples) -> dict[str, float]:
        stats = stacked_mode_metrics(self.classifier.predict_channels(samples.images))
        return {"eval/modes": stats["modes"], "eval/kl": stats["kl"]}
