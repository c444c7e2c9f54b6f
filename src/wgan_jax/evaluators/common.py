"""Builds the run's evaluator from its metric plan: `from_plan` (typed pieces) and
`make_evaluator` (an `EvalSpec`: loads the digit classifier or the Inception network it needs
and logs one line saying what is evaluated on which features).

`EvalSpec.from_config` is the one place below the trainer where the evaluators read a run's
config: the trainer, `runs` and the benchmarks build the spec once (it decides the plan) and
hand it to `make_evaluator`, `evaluator_for_data` and `evaluate_state`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, cast

import ml_collections

from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.eval_plan import EvalPlan, check_class_samples, eval_plan
from wgan_jax.evaluators.base import LabelsFn, ReferenceFn
from wgan_jax.evaluators.composite import Evaluator, Part
from wgan_jax.evaluators.conditional import (
    ClassEvaluator,
    StackedLabelEvaluator,
    heldout_label_accuracy,
)
from wgan_jax.evaluators.features import (
    FEATURE_CAP,
    FeatureEvaluator,
    FeatureSpace,
    InceptionEvaluator,
)
from wgan_jax.evaluators.spaces import digit_features, inception_features, load_inception
from wgan_jax.evaluators.stacked import StackedDigitsEvaluator
from wgan_jax.evaluators.toy import ModeEvaluator, W1Evaluator
from wgan_jax.metrics.digits_classifier import DigitClassifier

__all__ = ["EvalSpec", "make_evaluator", "from_plan"]

log = logging.getLogger("wgan_jax")


def from_plan(
    plan: EvalPlan, reference_fn: ReferenceFn, *, num_samples: int, seed: int = 0,
    kid_subsets: int = 100, mixture: str = "", classifier: DigitClassifier | None = None,
    extractor: Any = None, reference_labels: LabelsFn | None = None,
    class_frequencies: tuple[float, ...] = (),
) -> Evaluator:
    """The evaluators `plan` asks for, in one `Evaluator`.

    `reference_fn(n, seed)` returns n real examples (and `reference_labels(n, seed)` their
    labels, for class metrics); `mixture` names a toy mixture; `classifier` (digit features,
    stacked digits, class metrics) and `extractor` (Inception features) read images.
    """
    if plan.kind in ("toy", "swissroll"):
        parts: list[Part] = [ModeEvaluator(mixture)] if plan.kind == "toy" else []
        parts.append(W1Evaluator(reference_fn, seed))
        return Evaluator(plan, parts, class_frequencies=class_frequencies)
    digits = cast(DigitClassifier, classifier)  # the plan's digit features and labels need it
    fn = (inception_features(extractor) if plan.features == "inception"
          else digit_features(digits, per_channel=plan.kind == "stacked"))
    space = FeatureSpace(plan.features, fn, reference_fn, seed=seed, labels_fn=reference_labels,
                         num_reference=min(num_samples, FEATURE_CAP))
    parts = []
    if plan.kind == "stacked":
        parts.append(StackedDigitsEvaluator(digits))
    if plan.stacked_labels:
        parts.append(StackedLabelEvaluator(digits))
    parts.append(FeatureEvaluator(space, kid_subsets=kid_subsets) if extractor is None
                 else InceptionEvaluator(space, extractor, kid_subsets=kid_subsets))
    if plan.class_metrics:
        parts.append(ClassEvaluator(digits, space, class_frequencies))
    return Evaluator(plan, parts, class_frequencies=class_frequencies, classifier=classifier)


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """What evaluation needs from a run's config: the metric plan (decided once, from the
    config and the data's class count), the data (`DataSpec`: reference examples, the data
    directory holding the cached digit classifier), `num_samples` generated per evaluation
    (`config.eval.num_samples`), `inception_weights` (`config.eval.inception_weights`),
    whether samples come from the EMA weights (`ema`: `config.ema_decay > 0`), the
    generator's `matmul_precision` and the share of latents dropped by Jacobian truncation
    (`config.sampling.jacobian_truncation`, see `wgan_jax.jacobian_truncation`)."""

    plan: EvalPlan
    data: DataSpec
    num_samples: int
    inception_weights: str = ""
    ema: bool = False
    matmul_precision: str = "default"
    jacobian_truncation: float = 0.0

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, data: DataSpec | None = None,
                    plan: EvalPlan | None = None) -> EvalSpec:
        """The evaluation settings of a run's config; `ConfigError` for an impossible
        `config.eval` (what the plan cannot compute, too few samples per class). `data` and
        `plan`, when the caller built them from the same config, are used, not built again."""
        data = data or DataSpec.from_config(config)
        classes = num_classes(data)
        plan = plan or eval_plan(config, classes)
        if plan.class_metrics:
            check_class_samples(config, classes)
        return cls(
            plan=plan, data=data, num_samples=int(config.eval.num_samples),
            inception_weights=config.eval.inception_weights, ema=config.ema_decay > 0,
            matmul_precision=config.matmul_precision,
            jacobian_truncation=float(config.sampling.jacobian_truncation),
        )


def make_evaluator(
    spec: EvalSpec,
    reference_fn: ReferenceFn,
    seed: int = 0,
    kid_subsets: int = 100,
    *,
    reference_labels: LabelsFn | None = None,
    class_frequencies: tuple[float, ...] = (),
) -> Evaluator | None:
    """The evaluator `spec.plan` asks for, or None (with a warning) when no metric
    applies; logs one line saying which metrics are computed on which features.

    `reference_fn(n, seed)` returns n real examples (`DataIterator.reference_samples`); a
    conditional run also needs `class_frequencies` and, for its class metrics,
    `reference_labels(n, seed)` (`DataIterator.class_frequencies`, `.reference_labels`;
    `evaluator_for_data` passes all three).
    `kid_subsets` (100 in torch-fidelity's protocol) trades KID's variance for time.
    Raises `UserError` when `config.eval.inception_weights` names a file that cannot be
    loaded (`EvalSpec.from_config` raised any `ConfigError` already).
    """
    plan, data = spec.plan, spec.data
    if data.conditional and not class_frequencies:
        raise ValueError("the evaluator of a conditional run needs the data's class_frequencies")
    if plan.kind == "none":
        log.warning("evaluation: nothing to compute: %s; to evaluate, set "
                    "config.eval.inception_weights to the pytorch-fid Inception weights "
                    "(pt_inception-2015-12-05-*.pth or an .npz of them)", plan.description)
        return None
    classifier = None
    if plan.kind == "stacked" or plan.features == "digits":
        classifier = DigitClassifier.load_or_train(data.data_dir)
    extractor = None
    if plan.features == "inception":
        extractor = load_inception(spec.inception_weights)
    evaluator = from_plan(
        plan, reference_fn, num_samples=spec.num_samples, seed=seed,
        kid_subsets=kid_subsets, mixture=data.name,
        classifier=classifier, extractor=extractor, reference_labels=reference_labels,
        class_frequencies=tuple(class_frequencies))
    if plan.class_metrics:
        accuracy, size = heldout_label_accuracy(cast(DigitClassifier, classifier),
                                                data.image_size, data.num_channels)
        log.info("%s; real held-out digits (%d, %d px): label accuracy %.1f%%",
                 plan.description, size, data.image_size, 100 * accuracy)
    else:
        log.info("%s", plan.description)
    if spec.jacobian_truncation:
        log.info("evaluation samples: the %.1f%% of latents where the generator is steepest "
                 "are dropped (config.sampling.jacobian_truncation)",
                 100 * spec.jacobian_truncation)
    return evaluator
