"""Sample-quality evaluation of a generator: which metrics, on which features, computed on samples.

`eval_plan(config)` decides once, from the config alone, what evaluation computes and on which
feature space (`config.eval.features`: "auto", "digits", "inception" or "none"); `validate_config`
calls it, so a run that asks for something impossible stops with a one-line `ConfigError` before
anything is written. `make_evaluator(config, reference_fn)` builds that plan (caching the real
reference features) and logs one line saying which evaluator runs on which features;
`Evaluator(samples)` returns `{"eval/...": float}`:

* toy mixtures (ring8, grid25, 8gaussians, 25gaussians): modes, high_quality, reverse_kl (the
  VEEGAN / PacGAN protocol) and w1, the exact Wasserstein-1 distance to as many real samples
  (at most `W1_CAP`, since the assignment costs O(n^3)), on the 2-D samples themselves;
* toy:swissroll: w1 only;
* feature metrics fid, kid, precision, recall, density, coverage, named after their feature
  space: `eval/fid_digits` etc. on the hidden features of the small `DigitClassifier` (trained
  once, offline, cached under the data directory), `eval/fid_inception` etc. (plus `eval/is`)
  on FID-Inception pool3 features from `config.eval.inception_weights` (pytorch-fid weights,
  .pth or .npz);
* stacked_digits: modes (of 1000) and kl of the per-channel predicted digit triples, plus the
  feature metrics (digit features: the per-channel classifier features, concatenated);
* class-conditional `digits` runs, in addition: the samples are generated for labels in the
  data's class frequencies (`metrics.conditional.draw_class_labels`, the same labels for a
  seed) and scored by `eval/label_accuracy` (the share the digit classifier assigns to their
  label; real held-out digits: ~98.7%, logged in the start line), `eval/fid_digits_class_mean`
  and `eval/fid_digits_class_worst` (FID on the digit features within each class against the
  real reference examples of that class: the mean over classes and the worst one, whose label
  is `eval/fid_digits_class_worst_label`). A per-class FID needs enough samples of every
  class: conditional runs need `eval.num_samples >= CLASS_SAMPLES * classes` (the default
  2,500 gives ~250 generated against ~140 distinct real digits per class);
* class-conditional `stacked_digits` runs: `eval/label_accuracy`, the share whose three
  per-channel digits are their label's (`data.digits.stacked_digits_classes`); no per-class
  FID (1000 classes at 100 samples each would need 100,000 samples). Conditional runs of
  other data (no digit classifier reads their classes) get no label metrics, and the start
  line says so.

"auto" resolves to the digit features for the `digits` and `stacked_digits` datasets, to
Inception when `eval.inception_weights` is set, and otherwise to nothing: other images are not
silently scored on a digit classifier. "digits" may be asked for explicitly on any one-channel
dataset (e.g. tfds:mnist); RGB `digits` are scored on the mean of their channels (equal to the
grey digit for real images) and RGBA `digits` sprites on their alpha (ink) channel, the channel
that carries the digit (the class colour is not judged).

`evaluate_state` samples a train state (EMA weights when the run keeps them) and evaluates
(early stopping on those evaluations is one of the loop's policies, `wgan_jax.policies`). Which
metric is better which way, and which one picks the best
checkpoint, is `wgan_jax.metrics.ranking`'s rule. Everything here is deterministic for fixed
seeds.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_collections
import numpy as np

from wgan_jax import precision
from wgan_jax.config import resolve_data_dir
from wgan_jax.errors import ConfigError
from wgan_jax.metrics import (
    compare_features,
    inception_score,
    stacked_mode_metrics,
    toy_mixture,
    toy_mode_metrics,
    wasserstein1_exact,
)
from wgan_jax.metrics.conditional import draw_class_labels, label_accuracy, per_class_fid
from wgan_jax.metrics.ranking import choose_metric, lower_is_better
from wgan_jax.metrics.toy import TOY_MIXTURES

log = logging.getLogger("wgan_jax")

ReferenceFn = Callable[[int, int], np.ndarray]
LabelsFn = Callable[[int, int], "np.ndarray | None"]  # the labels of ReferenceFn's examples

W1_CAP = 2500  # samples in the exact W1 (Hungarian assignment, O(n^3))
FEATURE_CAP = 10_000  # samples in the feature metrics (PRDC is O(n^2) in memory traffic)
FEATURES = ("auto", "digits", "inception", "none")  # the values of config.eval.features
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


def eval_plan(config: ml_collections.ConfigDict) -> EvalPlan:
    """Resolves `config.eval.features` for the dataset; raises a one-line `ConfigError` when the
    request cannot be met or when `eval_every > 0` has nothing it can compute."""
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
        check_class_samples(config)
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


def check_class_samples(config: ml_collections.ConfigDict) -> None:
    """`ConfigError` when `config.eval.num_samples` gives a class fewer than `CLASS_SAMPLES`."""
    from wgan_jax.config import num_classes

    need = CLASS_SAMPLES * num_classes(config)
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


def _prefixed(metrics: dict[str, Any]) -> dict[str, float]:
    return {f"eval/{k}": float(v) for k, v in metrics.items()}


class Evaluator:
    """Metrics of generated samples against real data; see the module docstring.

    Build it with `make_evaluator`. `kind` is "toy", "swissroll", "digits" (images on digit
    classifier features), "stacked" or "inception" (images on Inception features); `features`
    ("digits", "inception", or "" for toy data; by default the kind's own) names the feature
    space in the metric keys. `class_frequencies` (a conditional run) are the data's, for the
    labels samples are generated for; `class_metrics` adds `CLASS_METRICS` (needs the digit
    `classifier` and `reference_labels`, the labels of `reference_fn`'s examples).
    """

    def __init__(
        self,
        kind: str,
        reference_fn: ReferenceFn,
        *,
        num_reference: int,
        seed: int = 0,
        mixture: str = "",
        features: str = "",
        feature_fn: Callable[[np.ndarray], np.ndarray] | None = None,
        classifier: Any = None,
        inception: Any = None,
        metric: str = "",
        kid_subsets: int = 100,
        description: str = "",
        class_frequencies: tuple[float, ...] = (),
        class_metrics: bool = False,
        reference_labels: LabelsFn | None = None,
    ) -> None:
        if class_metrics and (classifier is None or reference_labels is None
                              or not class_frequencies):
            raise ValueError("class metrics need the digit classifier, the reference examples' "
                             "labels and the data's class frequencies")
        self.kind = kind
        self.class_frequencies = tuple(class_frequencies)
        self.class_metrics = class_metrics
        self.stacked_labels = kind == "stacked" and bool(class_frequencies)
        self._reference_labels_fn = reference_labels
        self._reference_labels: np.ndarray | None = None
        self.features_name = features or {"digits": "digits", "stacked": "digits",
                                          "inception": "inception"}.get(kind, "")
        self.seed = seed
        self._reference_fn = reference_fn
        self._mixture = toy_mixture(mixture) if mixture else None
        self._feature_fn = feature_fn
        self._classifier = classifier
        self._inception = inception
        self._toy_reference: dict[int, np.ndarray] = {}
        self._reference_features: np.ndarray | None = None
        self.num_reference = num_reference
        self.kid_subsets = kid_subsets
        self.default_metric = choose_metric(self.metric_names())
        self.metric = choose_metric(self.metric_names(), metric)
        if not self.metric:
            raise ConfigError(f"config.eval.metric: {metric!r} is not computed here; choose one "
                              f"of {', '.join(self.metric_names())}")
        self.description = description

    @property
    def classifier(self) -> Any:
        """The digit classifier of "digits"/"stacked" evaluators (None for others)."""
        return self._classifier

    # ---- real data ---------------------------------------------------------------------
    def toy_reference(self, n: int) -> np.ndarray:
        """`n` real toy samples drawn with the evaluator's seed (fixed across evaluations)."""
        if n not in self._toy_reference:
            self._toy_reference[n] = np.asarray(self._reference_fn(n, self.seed), np.float64)
        return self._toy_reference[n]

    def reference_features(self) -> np.ndarray:
        """Features of up to `num_reference` distinct real images (computed once)."""
        if self._reference_features is None:
            real = np.asarray(self._reference_fn(self.num_reference, self.seed), np.float32)
            # Small datasets (digits: 1797 images) are sampled with replacement; duplicates
            # would shrink the k-NN radii of precision/recall, so they are dropped.
            _, first = np.unique(real.reshape(len(real), -1), axis=0, return_index=True)
            self._reference_features = self.features(real[first])
            if self._reference_labels_fn is not None:
                labels = self._reference_labels_fn(self.num_reference, self.seed)
                if labels is not None:
                    self._reference_labels = np.asarray(labels)[first]
        return self._reference_features

    def reference_labels(self) -> np.ndarray:
        """The labels of `reference_features()`'s images (class-metric evaluators only)."""
        self.reference_features()
        if self._reference_labels is None:
            raise ValueError("this evaluator has no reference labels")
        return self._reference_labels

    def sample_labels(self, n: int, seed: int) -> np.ndarray:
        """The labels of `n` conditional samples: the data's class frequencies, shuffled with
        `seed` (`metrics.conditional.draw_class_labels`)."""
        if not self.class_frequencies:
            raise ValueError("this evaluator has no class frequencies (not a conditional run)")
        return draw_class_labels(self.class_frequencies, n, seed)

    def features(self, images: np.ndarray) -> np.ndarray:
        """The feature vectors the image metrics compare, `[N, D]`."""
        if self._feature_fn is None:
            raise ValueError(f"the {self.kind!r} evaluator has no image features")
        return self._feature_fn(np.clip(np.asarray(images, np.float32), -1.0, 1.0))

    # ---- metrics -----------------------------------------------------------------------
    def __call__(self, samples: np.ndarray, labels: np.ndarray | None = None) -> dict[str, float]:
        """`{"eval/<metric>": value}` of generated `samples` (toy `[N, 2]`, images NHWC);
        an evaluator with `class_metrics` needs the `labels` they were generated for."""
        samples = np.asarray(samples)
        if samples.shape[0] < 2:
            raise ValueError(f"need at least 2 samples to evaluate, got {samples.shape[0]}")
        if (self.class_metrics or self.stacked_labels) and (
                labels is None or len(labels) != len(samples)):
            raise ValueError("a conditional evaluation needs the label of every sample")
        if not np.isfinite(samples).all():
            bad = {m: (0.0 if not lower_is_better(m) else math.inf) for m in self.metric_names()}
            if self.class_metrics:
                bad["eval/fid_digits_class_worst_label"] = -1.0
            return bad
        if self.kind in ("toy", "swissroll"):
            return self._toy(samples.astype(np.float64))
        out: dict[str, float] = {}
        images = np.clip(samples.astype(np.float32), -1.0, 1.0)
        if self.kind == "stacked":
            digits = self._classifier.predict_channels(images)
            stats = stacked_mode_metrics(digits)
            out.update({"eval/modes": stats["modes"], "eval/kl": stats["kl"]})
            if self.stacked_labels:
                from wgan_jax.data.digits import stacked_digits_classes

                out["eval/label_accuracy"] = label_accuracy(stacked_digits_classes(digits),
                                                            np.asarray(labels))
        capped = images[:FEATURE_CAP]
        if self._inception is not None:  # one Inception pass for the features and the IS
            fake, probs = self._inception.features_and_probs(capped)
            out.update(self._feature_metrics(fake))
            out["eval/is"] = inception_score(probs, splits=min(10, len(probs)))[0]
        elif self.class_metrics:  # the digit features of all samples, computed once
            features = self.features(images)
            out.update(self._feature_metrics(features[:FEATURE_CAP]))
            out.update(self._class_metrics(features, np.asarray(labels)))
        else:
            out.update(self._feature_metrics(self.features(capped)))
        return out

    def _toy(self, samples: np.ndarray) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._mixture is not None:
            centres, std = self._mixture
            out.update(_prefixed(toy_mode_metrics(samples, centres, std)))
        n = min(len(samples), W1_CAP)
        out["eval/w1"] = wasserstein1_exact(samples[:n], self.toy_reference(n))
        return out

    def _class_metrics(self, features: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """Label accuracy and per-class FID from the samples' digit-classifier features."""
        predicted = self._classifier.logits_from_features(features).argmax(axis=1)
        present = [k for k, p in enumerate(self.class_frequencies) if p > 0]
        fids = per_class_fid(self.reference_features(), self.reference_labels(), features,
                             labels, present)
        worst = int(np.argmax(fids))
        return {"eval/label_accuracy": label_accuracy(predicted, labels),
                "eval/fid_digits_class_mean": float(fids.mean()),
                "eval/fid_digits_class_worst": float(fids[worst]),
                "eval/fid_digits_class_worst_label": float(present[worst])}

    def _feature_metrics(self, fake: np.ndarray) -> dict[str, float]:
        real = self.reference_features()
        m = compare_features(real, fake, kid_subsets=self.kid_subsets, seed=self.seed)
        m["kid"] = m["kid_mean"]
        return {f"eval/{k}_{self.features_name}": float(m[k]) for k in FEATURE_METRICS}

    def metric_names(self) -> tuple[str, ...]:
        """The keys `__call__` returns."""
        return metric_names(self.kind, self.features_name, self.class_metrics,
                            self.stacked_labels)


def digit_ink(images: np.ndarray) -> np.ndarray:
    """The one channel of `[N, H, W, C]` `digits` images that carries the digit, `[N, H, W, 1]`:
    grey as is, the mean of R, G and B (all equal to the grey digit in real RGB digits), the
    alpha channel of RGBA sprites (the ink; their colour only names the class)."""
    channels = images.shape[-1]
    if channels == 1:
        return images
    if channels == 3:
        return images.mean(axis=-1, keepdims=True)
    if channels == 4:
        return images[..., 3:4]
    raise ValueError(f"digit images have 1, 3 or 4 channels, got shape {images.shape}")


def _per_channel_features(classifier: Any) -> Callable[[np.ndarray], np.ndarray]:
    def features(images: np.ndarray) -> np.ndarray:
        n, h, w, c = images.shape
        per_channel = np.moveaxis(images, -1, 1).reshape(n * c, h, w, 1)
        return classifier.features(per_channel).reshape(n, -1)

    return features


def make_evaluator(
    config: ml_collections.ConfigDict,
    reference_fn: ReferenceFn,
    seed: int = 0,
    kid_subsets: int = 100,
    *,
    reference_labels: LabelsFn | None = None,
    class_frequencies: tuple[float, ...] = (),
) -> Evaluator | None:
    """The evaluator `eval_plan(config)` asks for, or None (with a warning) when no metric
    applies; logs one line saying which evaluator runs on which features.

    `reference_fn(n, seed)` returns n real examples (`DataIterator.reference_samples`); a
    conditional run also needs `class_frequencies` and, for its class metrics,
    `reference_labels(n, seed)` (`DataIterator.class_frequencies`, `.reference_labels`;
    `evaluator_for_data` passes all three).
    `kid_subsets` (100 in torch-fidelity's protocol) trades KID's variance for time.
    Raises `ConfigError` for an impossible `config.eval` and `UserError` when
    `config.eval.inception_weights` names a file that cannot be loaded.
    """
    plan = eval_plan(config)
    if plan.class_metrics:
        check_class_samples(config)
    if config.model.conditional != "none" and not class_frequencies:
        raise ValueError("the evaluator of a conditional run needs the data's class_frequencies")
    if plan.kind == "none":
        log.warning("evaluation: nothing to compute: %s; to evaluate, set "
                    "config.eval.inception_weights to the pytorch-fid Inception weights "
                    "(pt_inception-2015-12-05-*.pth or an .npz of them)", plan.description)
        return None
    common = dict(num_reference=int(config.eval.num_samples), seed=seed, metric=plan.metric,
                  features=plan.features, description=plan.description,
                  class_frequencies=tuple(class_frequencies))
    if plan.kind in ("toy", "swissroll"):
        _, _, name = config.dataset.partition(":")
        evaluator = Evaluator(plan.kind, reference_fn, **common,
                              mixture=name if plan.kind == "toy" else "")
    else:
        common.update(num_reference=min(common["num_reference"], FEATURE_CAP),
                      kid_subsets=kid_subsets)
        classifier = None
        if plan.kind == "stacked" or plan.features == "digits":
            from wgan_jax.metrics.digits_classifier import DigitClassifier

            classifier = DigitClassifier.load_or_train(resolve_data_dir(config))
        if plan.features == "inception":
            extractor = _load_inception(config.eval.inception_weights)

            def inception_features(images: np.ndarray) -> np.ndarray:
                return extractor.features(images[..., :3])

            evaluator = Evaluator(plan.kind, reference_fn, **common, classifier=classifier,
                                  feature_fn=inception_features,
                                  inception=_ThreeChannels(extractor))
        else:
            feature_fn = (_per_channel_features(classifier) if plan.kind == "stacked"
                          else lambda images: classifier.features(digit_ink(images)))
            evaluator = Evaluator(plan.kind, reference_fn, **common, classifier=classifier,
                                  feature_fn=feature_fn, class_metrics=plan.class_metrics,
                                  reference_labels=reference_labels)
    if plan.class_metrics:
        accuracy, size = heldout_label_accuracy(config, classifier)
        log.info("%s; real held-out digits (%d, %d px): label accuracy %.1f%%",
                 plan.description, size, config.image_size, 100 * accuracy)
    else:
        log.info("%s", plan.description)
    return evaluator


def heldout_label_accuracy(config: ml_collections.ConfigDict, classifier: Any) -> tuple[float, int]:
    """(label accuracy, count) of the digit classifier's held-out real digits at the run's
    size and channels, read as the evaluator reads samples: the floor of
    `eval/label_accuracy`."""
    from wgan_jax.data.digits import digits_source
    from wgan_jax.data.images import to_float
    from wgan_jax.metrics.digits_classifier import train_test_split_indices

    source = digits_source(config.image_size, config.num_channels)
    _, test = train_test_split_indices(len(source.labels))
    images = np.clip(to_float(source.images[test]), -1.0, 1.0)
    predicted = classifier.predict(digit_ink(images))
    return label_accuracy(predicted, source.labels[test]), len(test)


class _ThreeChannels:
    """Drops an alpha channel before the Inception network (which takes 1 or 3 channels)."""

    def __init__(self, extractor: Any) -> None:
        self._extractor = extractor

    def features_and_probs(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._extractor.features_and_probs(images[..., :3])


def _load_inception(path: str) -> Any:
    from wgan_jax.errors import UserError
    from wgan_jax.metrics.inception import InceptionExtractor

    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise UserError(f"config.eval.inception_weights: no file {path!r}")
    try:
        return InceptionExtractor.from_pytorch_fid_weights(path)
    except (ImportError, ValueError, OSError, KeyError) as error:
        first = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"config.eval.inception_weights: cannot load {path!r}: {first}") from None


def reference_fn_for(config: ml_collections.ConfigDict) -> ReferenceFn:
    """`reference_samples` of the config's input pipeline (built lazily; reads no batch)."""
    return _pipeline(config).reference_samples


def _pipeline(config: ml_collections.ConfigDict) -> Any:
    from wgan_jax import input_pipeline
    from wgan_jax.step import make_mesh

    return input_pipeline.create_input_pipeline(config, make_mesh())


def evaluator_for_data(
    config: ml_collections.ConfigDict, data: Any = None, seed: int = 0
) -> Evaluator | None:
    """`make_evaluator` on `data` (a `DataIterator`; by default the config's, built lazily):
    its reference examples, their labels and its class frequencies."""
    data = _pipeline(config) if data is None else data
    return make_evaluator(config, data.reference_samples, seed=seed,
                          reference_labels=data.reference_labels,
                          class_frequencies=data.class_frequencies)


def evaluate_state(
    config: ml_collections.ConfigDict,
    gan: Any,
    state: Any,
    seed: int = 0,
    *,
    evaluator: Evaluator | None = None,
    num_samples: int | None = None,
) -> dict[str, float]:
    """Samples `config.eval.num_samples` (or `num_samples`) from `state` and evaluates them.

    The generator runs at `config.matmul_precision`. Uses the EMA generator when the run
    keeps one (`config.ema_decay > 0`). A conditional generator makes them for labels in the
    data's class frequencies (`Evaluator.sample_labels`). Pass the trainer's `evaluator` to
    reuse its cached reference features; otherwise one is built here. Returns {} when no
    metric applies to the dataset.
    """
    if evaluator is None:
        evaluator = evaluator_for_data(config, seed=seed)
        if evaluator is None:
            return {}
    use_ema = config.ema_decay > 0 and getattr(state, "ema_params", None) is not None
    n = int(num_samples or config.eval.num_samples)
    labels = evaluator.sample_labels(n, seed + 54321) if gan.num_classes else None
    with precision.scope(config.matmul_precision):
        samples = draw_samples(gan, state, n, seed=seed + 12345, use_ema=use_ema, labels=labels)
    return evaluator(samples, labels) if labels is not None else evaluator(samples)


def draw_samples(
    gan: Any, state: Any, num: int, seed: int, use_ema: bool, labels: Any = None
) -> np.ndarray:
    """`num` float32 samples from latents drawn with `seed`, in batches of 1000 (a
    conditional generator's of classes `labels`, see `state.apply_generator`).

    The one implementation behind `wgan_jax.runs.generate_samples` too.
    """
    import jax

    z = jax.random.normal(jax.random.PRNGKey(seed), (num, gan.z_dim))
    return generate_from_latents(gan, state, z, use_ema, labels)


def generate_from_latents(
    gan: Any, state: Any, z: Any, use_ema: bool, labels: Any = None
) -> np.ndarray:
    """The generator's float32 outputs for latents `z` [N, z_dim], in batches of 1000; a
    conditional generator's of classes `labels` [N] (None: sample i of class i % classes)."""
    fn = _jitted_generator(gan, use_ema)
    if labels is None and gan.num_classes:
        labels = np.arange(len(z), dtype=np.int32) % gan.num_classes
    parts = [np.asarray(fn(state, z[i : i + 1000],
                           None if labels is None else labels[i : i + 1000]))
             for i in range(0, len(z), 1000)]
    return np.concatenate(parts).astype(np.float32)


_LAST_GENERATOR: list[Any] = []  # [(gan, use_ema, jitted fn)]: the most recent only


def _jitted_generator(gan: Any, use_ema: bool) -> Any:
    """The jitted inference function of `gan`, kept across calls so that the evaluations of a
    training run compile once (a new GAN object, e.g. after a rollback, compiles anew)."""
    import jax

    from wgan_jax.state import apply_generator

    if not (_LAST_GENERATOR and _LAST_GENERATOR[0][0] is gan
            and _LAST_GENERATOR[0][1] == use_ema):
        fn = jax.jit(lambda s, z, y: apply_generator(gan, s, z, use_ema=use_ema, labels=y))
        _LAST_GENERATOR[:] = [(gan, use_ema, fn)]
    return _LAST_GENERATOR[0][2]
