"""The run's evaluator: the evaluators its plan asks for, run on the same samples, their
results merged into one `{"eval/<metric>": value}`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from wgan_jax.eval_plan import EvalPlan
from wgan_jax.evaluators.base import Samples
from wgan_jax.metrics.conditional import draw_class_labels
from wgan_jax.metrics.ranking import choose_metric, lower_is_better

__all__ = ["Evaluator", "Part"]

#: One evaluator of the composite: samples -> `{"eval/...": value}`.
Part = Callable[[Samples], dict[str, float]]


class Evaluator:
    """`parts` (evaluators of one family each) over one `Samples`; see `common.from_plan`.

    `plan` names the metrics (`metric_names()`), the one that ranks evaluations (`metric`)
    and says in `description` what is evaluated. A conditional run's samples are generated for
    labels in the data's `class_frequencies` (`sample_labels`); `classifier` is the digit
    classifier of digit evaluations (None for others).
    """

    def __init__(self, plan: EvalPlan, parts: Sequence[Part], *,
                 class_frequencies: tuple[float, ...] = (), classifier: Any = None) -> None:
        self.plan, self.parts = plan, tuple(parts)
        self.class_frequencies = tuple(class_frequencies)
        self.classifier = classifier

    @property
    def kind(self) -> str:
        """The plan's kind of evaluation (`EvalPlan.kind`)."""
        return self.plan.kind

    @property
    def metric(self) -> str:
        """The metric that ranks evaluations (`EvalPlan.metric`)."""
        return self.plan.metric

    @property
    def description(self) -> str:
        """The plan in words, for the run's log (`EvalPlan.description`)."""
        return self.plan.description

    @property
    def class_metrics(self) -> bool:
        """Whether the plan has class-conditional metrics (`EvalPlan.class_metrics`)."""
        return self.plan.class_metrics

    @property
    def default_metric(self) -> str:
        """The metric that would rank evaluations had `config.eval.metric` named none."""
        return choose_metric(self.plan.names)

    def metric_names(self) -> tuple[str, ...]:
        """The keys `__call__` returns."""
        return self.plan.names

    def sample_labels(self, n: int, seed: int) -> np.ndarray:
        """The labels of `n` conditional samples: the data's class frequencies, shuffled with
        `seed` (`metrics.conditional.draw_class_labels`)."""
        if not self.class_frequencies:
            raise ValueError("this evaluator has no class frequencies (not a conditional run)")
        return draw_class_labels(self.class_frequencies, n, seed)

    def __call__(self, samples: np.ndarray, labels: np.ndarray | None = None) -> dict[str, float]:
        """The metrics of generated `samples` (toy `[N, 2]`, images NHWC); a conditional
        evaluation needs the `labels` they were generated for. Samples with a non-finite
        value get every metric's worst value (and -1 for a class number)."""
        samples = np.asarray(samples)
        if samples.shape[0] < 2:
            raise ValueError(f"need at least 2 samples to evaluate, got {samples.shape[0]}")
        if (self.plan.class_metrics or self.plan.stacked_labels) and (
                labels is None or len(labels) != len(samples)):
            raise ValueError("a conditional evaluation needs the label of every sample")
        if not np.isfinite(samples).all():
            return {m: -1.0 if m.endswith("_label") else math.inf if lower_is_better(m) else 0.0
                    for m in self.plan.names}
        shared = Samples(samples, labels)
        out: dict[str, float] = {}
        for part in self.parts:
            out.update(part(shared))
        return out
