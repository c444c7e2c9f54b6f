"""Evaluating a train state: its generator's samples (the EMA weights when the run keeps
them; a conditional run's for labels in the data's class frequencies), scored by the run's
evaluator."""

from __future__ import annotations

from typing import Any

from wgan_jax import precision, sampling
from wgan_jax.evaluators.common import EvalSpec, make_evaluator
from wgan_jax.evaluators.composite import Evaluator
from wgan_jax.input_pipeline import DataIterator, create_input_pipeline
from wgan_jax.step import make_mesh

__all__ = ["evaluate_state", "evaluator_for_data"]


def evaluator_for_data(
    spec: EvalSpec, data: DataIterator | None = None, seed: int = 0
) -> Evaluator | None:
    """`make_evaluator` on `data` (a `DataIterator`; by default the one of `spec.data`, built
    here without reading a batch): its reference examples, their labels, its class
    frequencies."""
    if data is None:
        data = create_input_pipeline(spec.data, make_mesh())
    return make_evaluator(spec, data.reference_samples, seed=seed,
                          reference_labels=data.reference_labels,
                          class_frequencies=data.class_frequencies)


def evaluate_state(
    spec: EvalSpec,
    gan: Any,
    state: Any,
    seed: int = 0,
    *,
    evaluator: Any = None,
    num_samples: int | None = None,
) -> dict[str, float]:
    """Samples `spec.num_samples` (or `num_samples`) from `state` and evaluates them.

    The generator runs at `spec.matmul_precision`. Uses the EMA generator when the run
    keeps one (`spec.ema`: `config.ema_decay > 0`), on the latents Jacobian truncation keeps
    when `spec.jacobian_truncation` > 0. A conditional generator makes them for
    labels in the data's class frequencies (`Evaluator.sample_labels`). Pass the trainer's
    `evaluator` (any callable of the samples) to reuse its cached reference features;
    otherwise one is built here. Returns {} when no metric applies to the dataset.
    """
    if evaluator is None:
        evaluator = evaluator_for_data(spec, seed=seed)
        if evaluator is None:
            return {}
    use_ema = spec.ema and getattr(state, "ema_params", None) is not None
    n = int(num_samples or spec.num_samples)
    labels = evaluator.sample_labels(n, seed + 54321) if gan.num_classes else None
    with precision.scope(spec.matmul_precision):
        samples = sampling.draw_samples(gan, state, n, seed=seed + 12345, use_ema=use_ema,
                                        labels=labels,
                                        jacobian_truncation=spec.jacobian_truncation)
    return evaluator(samples, labels) if labels is not None else evaluator(samples)
