"""Which way is better for each evaluation metric: one rule for checkpoints, early stopping and
the health rules."""

from __future__ import annotations

# Counts, fractions and scores; every other metric (fid, kid, w1, reverse_kl, kl, ...) is a
# distance or divergence, so lower is better.
HIGHER_IS_BETTER = (
    "modes", "is", "inception_score", "precision", "recall", "density", "coverage",
    "high_quality", "hq", "accuracy",
)


def lower_is_better(metric: str) -> bool:
    """For `eval/NAME` or `NAME`: False when NAME (or its first `_` word) is a score."""
    name = metric.split("/")[-1].lower()
    return not (name in HIGHER_IS_BETTER or name.split("_")[0] in HIGHER_IS_BETTER)
