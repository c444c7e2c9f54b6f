"""The evaluators' one door to the metric plan (`EvalPlan`: which metrics a run gets).

The plan is decided from the config alone, before anything is built; every evaluator module
reads it through here, so moving the plan (to `wgan_jax.eval_plan`) changes this file only.
"""

from __future__ import annotations

import ml_collections

from wgan_jax.evaluation import (
    FEATURE_METRICS,
    EvalPlan,
    check_class_samples,
    eval_plan,
)

__all__ = ["FEATURE_METRICS", "EvalPlan", "check_samples_per_class", "plan_for"]


def plan_for(config: ml_collections.ConfigDict) -> EvalPlan:
    """The metric plan of `config` (`ConfigError` when it asks for something impossible)."""
    return eval_plan(config)


def check_samples_per_class(config: ml_collections.ConfigDict) -> None:
    """`ConfigError` when `config.eval.num_samples` is too few for the per-class FID."""
    check_class_samples(config)
