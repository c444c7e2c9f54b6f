"""Which metrics a run's evaluation computes, on which feature space: the plan, without JAX.

`eval_plan(config, num_classes)` decides once, from the config and the run's class count
(`wgan_jax.data.sources.num_classes`), what evaluation computes and on which feature space
(`config.eval.features`: "auto", "digits", "inception" or "none"). The trainer calls it with
`validate_config` before anything is written, so a run that asks for something impossible
stops with a one-line `ConfigError`; the evaluator (`wgan_jax.evaluators.make_evaluator`)
builds what it says. Which metric is better which way, and which one picks the best checkpoint,
is `wgan_jax.metrics.ranking`'s rule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ml_collections

from wgan_jax.config import TOY_MIXTURES
from wgan_jax.errors import ConfigError
from wgan_jax.metrics.ranking import choose_metric, lower_is_better

__all__ = ["eval_plan", "EvalPlan", "metric_names", "check_class_samples", "FEATURES"]

FEATURES = ("auto", "digits", "inception", "none")  #: the values of config.eval.features
FEATURE_METRICS = ("fid", "kid", "precision", "recall", "density", "coverage")
TOY_METRICS = ("modes", "high_quality", "reverse_kl", "w1")
DIGITS_DATASETS = ("digits", "stacked_digits")
CLASS_SAMPLES = 100  # generated samples per class a conditional evaluation needs at least
CLASS_METRICS = ("label_accuracy", "fid_digits_class_mean", "fid_digits_class_worst",
                 "fid_digits_class_worst_label")


def metric_names(
    kind: str, features: str, class_metrics: bool = False, stacked_labels: bool = False
) -> tuple[str, ...]:
    """The keys an evaluator of `kind` on `features` returns (feature metrics carry the
    feature space in their name: `eval/fid_digits`, `eval/fid_inception`), with the
    conditional runs' `CLASS_METRICS` when `class_metrics`, and `eval/label_accuracy` for a
    conditional stacked_digits run (`stacked_labels`)."""
    if kind == "toy":
        return tuple(f"eval/{m}" for m in TOY_METRICS)
    if kind == "swissroll":
        return ("eval/w1",)
    if kind == "none":
        return ()
    names = tuple(f"eval/{m}_{features}" for m in FEATURE_METRICS)
    if kind == "stacked":
        names = ("eval/modes", "eval/kl", *names)
        if stacked_labels:
            names = (*names, "eval/label_accuracy")
    if features == "inception":
        names = (*names, "eval/is")
    if class_metrics:
        names = (*names, *(f"eval/{m}" for m in CLASS_METRICS))
    return names


@dataclass(frozen=True)
class EvalPlan:
    """What evaluation computes for a config: `kind` ("toy", "swissroll", "digits", "stacked",
    "inception" or "none"), its feature space ("digits", "inception", or "" for toy data), the
    metric keys, the metric that ranks evaluations, a plain-words description, and whether
    the conditional `CLASS_METRICS` are computed."""

    kind: str
    features: str
    names: tuple[str, ...]
    metric: str
    description: str
    class_metrics: bool = False  # a conditional digits run: label accuracy, per-class FID
    stacked_labels: bool = False  # a conditional stacked_digits run: label accuracy


def _feature_words(config: ml_collections.ConfigDict, kind: str, features: str) -> str:
    channels = config.num_channels
    if features == "inception":
        alpha = ", alpha dropped" if channels == 4 else ""
        return (f"Inception pool3 features ({os.path.basename(config.eval.inception_weights)}"
                f"{alpha})")
    if features == "digits":
        which = {
            "stacked": "each channel's digit, features concatenated",
            1: "the single channel", 3: "the mean of R, G and B", 4: "the alpha (ink) channel",
        }
        return (f"hidden features of the 8x8 digit classifier, on "
                f"{which['stacked' if kind == 'stacked' else channels]}")
    return "the 2-D samples themselves"


def eval_plan(config: ml_collections.ConfigDict, num_classes: int) -> EvalPlan:
    """Resolves `config.eval.features` for the dataset; raises a one-line `ConfigError` when the
    request cannot be met or when `eval_every > 0` has nothing it can compute.

    `num_classes` is the run's class count (`wgan_jax.data.sources.num_classes`; 0 for an
    unconditional run): a conditional digits run's per-class FID needs samples of each class.
    """
    dataset = config.dataset
    source, _, name = dataset.partition(":")
    requested = config.eval.features
    if requested not in FEATURES:
        raise ConfigError(f"config.eval.features: must be one of {', '.join(FEATURES)}; "
                          f"got {requested!r}")
    weights = config.eval.inception_weights
    nothing = ""  # why nothing can be computed, when so
    if source == "toy":
        if requested in ("digits", "inception"):
            raise ConfigError(f"config.eval.features: {requested!r} needs images; {dataset} is "
                              "evaluated on its 2-D samples (use 'auto')")
        kind = "none" if requested == "none" else (
            "swissroll" if name == "swissroll" else "toy" if name in TOY_MIXTURES else "none")
        features = ""
        nothing = f"no metrics for {dataset}" if kind == "none" else ""
    else:
        features = requested
        if requested == "auto":
            features = ("digits" if source in DIGITS_DATASETS
                        else "inception" if weights else "none")
            nothing = (f"{dataset} is not a digits dataset and config.eval.inception_weights is "
                       "empty" if features == "none" else "")
        if features == "digits" and source not in DIGITS_DATASETS and config.num_channels != 1:
            raise ConfigError(
                f"config.eval.features: 'digits' (the 8x8 digit classifier) needs one-channel "
                f"images or the digits datasets; {dataset} has {config.num_channels} channels")
        if features == "inception" and not weights:
            raise ConfigError("config.eval.features: 'inception' needs "
                              "config.eval.inception_weights (pytorch-fid weights, .pth or .npz)")
        kind = ("none" if features == "none" else
                "stacked" if source == "stacked_digits" else features)
        path = os.path.expanduser(weights)
        if (features == "inception" and config.eval_every > 0 and "://" not in path
                and not os.path.isfile(path)):
            raise ConfigError(f"config.eval.inception_weights: no file {path!r}")
    if requested == "none":
        nothing = "config.eval.features is 'none'"
    if kind == "none" and config.eval_every > 0:
        raise ConfigError(
            f"config.eval_every: {config.eval_every}, but nothing can be evaluated ({nothing}); "
            "set eval_every=0, or eval.inception_weights=PATH (Inception features), or for "
            "one-channel digit-like images eval.features='digits'")
    if kind == "none":
        return EvalPlan("none", "none", (), "", nothing)
    conditional = config.model.conditional != "none"
    class_metrics = conditional and source == "digits" and features == "digits"
    if class_metrics and config.eval_every > 0:  # make_evaluator checks it in any case
        check_class_samples(config, num_classes)
    stacked_labels = conditional and kind == "stacked"
    names = metric_names(kind, features, class_metrics, stacked_labels)
    metric = choose_metric(names, config.eval.metric)
    if not metric:
        raise ConfigError(f"config.eval.metric: {config.eval.metric!r} is not computed here; "
                          f"choose one of {', '.join(names)}")
    better = "lower" if lower_is_better(metric) else "higher"
    shape = "2-D" if source == "toy" else (
        f"{config.num_channels} channel{'s' if config.num_channels > 1 else ''}")
    description = (f"evaluation of {dataset} ({shape}) on "
                   f"{_feature_words(config, kind, features)}: {', '.join(names)}; "
                   f"{metric} ranks evaluations ({better} is better)")
    if conditional:
        description += "; " + _class_words(config, class_metrics, stacked_labels)
    return EvalPlan(kind, features, names, metric, description, class_metrics, stacked_labels)


def check_class_samples(config: ml_collections.ConfigDict, num_classes: int) -> None:
    """`ConfigError` when `config.eval.num_samples` gives one of the `num_classes` classes
    fewer than `CLASS_SAMPLES`."""
    need = CLASS_SAMPLES * num_classes
    if config.eval.num_samples < need:
        raise ConfigError(
            f"config.eval.num_samples: {config.eval.num_samples}, but the per-class FID of a "
            f"conditional run needs at least {CLASS_SAMPLES} samples per class ({need}; "
            "`evaluate --num` too)")


def _class_words(
    config: ml_collections.ConfigDict, class_metrics: bool, stacked_labels: bool = False
) -> str:
    """The start line's words on a conditional run's labels."""
    if class_metrics:
        return ("conditional: samples generated for labels in the data's class frequencies, "
                "label accuracy by the digit classifier, FID within each class on its features")
    source = config.dataset.partition(":")[0]
    why = ("label accuracy by the digit classifier on each channel (all three digits must "
           "match the label); no per-class FID: its 1000 classes at 100 samples each would "
           "need 100,000 samples" if stacked_labels else
           "no label accuracy or per-class FID: they are computed on the digit features "
           "(eval.features='digits')" if source == "digits" else
           f"no label accuracy or per-class FID: no classifier reads the classes of "
           f"{config.dataset}")
    return f"conditional: samples generated for labels in the data's class frequencies; {why}"
