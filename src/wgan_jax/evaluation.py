"""Sample-quality evaluation of a generator: which metrics fit a dataset, computed on samples.

`make_evaluator(config, reference_fn)` picks the metrics for `config.dataset` once (and caches the
real reference features); `Evaluator(samples)` returns `{"eval/...": float}`:

* toy mixtures (ring8, grid25, 8gaussians, 25gaussians): modes, high_quality, reverse_kl (the
  VEEGAN / PacGAN protocol) and w1, the exact Wasserstein-1 distance to as many real samples
  (at most `W1_CAP`, since the assignment costs O(n^3));
* toy:swissroll: w1 only;
* one-channel images: fid, kid, precision, recall, density, coverage on the hidden features of
  the small `DigitClassifier` (trained once, offline, cached under the data directory);
* stacked_digits: modes (of 1000) and kl of the per-channel predicted digit triples, plus the
  feature metrics on the concatenated per-channel classifier features;
* other colour images: the feature metrics and is (Inception score) on FID-Inception pool3
  features when `config.eval.inception_weights` names the pytorch-fid weights (.pth or .npz);
  without them there is nothing meaningful to compute, so `make_evaluator` warns and returns
  None.

`evaluate_state` samples a train state (EMA weights when the run keeps them) and evaluates;
`EarlyStopping` turns a stream of evaluations into a stop decision whose bookkeeping is JSON,
so checkpoints can carry it. Everything here is deterministic for fixed seeds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from wgan_jax.metrics import (
    compare_features,
    inception_score,
    stacked_mode_metrics,
    toy_mixture,
    toy_mode_metrics,
    wasserstein1_exact,
)
from wgan_jax.metrics.direction import lower_is_better
from wgan_jax.metrics.toy import TOY_MIXTURES

log = logging.getLogger("wgan_jax")

ReferenceFn = Callable[[int, int], np.ndarray]

W1_CAP = 2500  # samples in the exact W1 (Hungarian assignment, O(n^3))
FEATURE_CAP = 10_000  # samples in the feature metrics (PRDC is O(n^2) in memory traffic)
def _prefixed(metrics: dict[str, Any]) -> dict[str, float]:
    return {f"eval/{k}": float(v) for k, v in metrics.items()}


class Evaluator:
    """Metrics of generated samples against real data; see the module docstring.

    Build it with `make_evaluator`. `kind` is "toy", "swissroll", "digits" (one-channel images
    on classifier features), "stacked" or "inception".
    """

    def __init__(
        self,
        kind: str,
        reference_fn: ReferenceFn,
        *,
        num_reference: int,
        seed: int = 0,
        mixture: str = "",
        feature_fn: Callable[[np.ndarray], np.ndarray] | None = None,
        classifier: Any = None,
        inception: Any = None,
        metric: str = "",
        kid_subsets: int = 100,
    ) -> None:
        self.kind = kind
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
        self.default_metric = "eval/w1" if kind in ("toy", "swissroll") else "eval/fid"
        self.metric = _normalise(metric) or self.default_metric

    @staticmethod
    def lower_is_better(metric: str) -> bool:
        """Whether a smaller value of `metric` (with or without the eval/ prefix) is better."""
        return lower_is_better(metric)

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
            real = np.unique(real.reshape(len(real), -1), axis=0).reshape(-1, *real.shape[1:])
            self._reference_features = self.features(real)
        return self._reference_features

    def features(self, images: np.ndarray) -> np.ndarray:
        """The feature vectors the image metrics compare, `[N, D]`."""
        if self._feature_fn is None:
            raise ValueError(f"the {self.kind!r} evaluator has no image features")
        return self._feature_fn(np.clip(np.asarray(images, np.float32), -1.0, 1.0))

    # ---- metrics -----------------------------------------------------------------------
    def __call__(self, samples: np.ndarray) -> dict[str, float]:
        """`{"eval/<metric>": value}` of generated `samples` (toy `[N, 2]`, images NHWC)."""
        samples = np.asarray(samples)
        if samples.shape[0] < 2:
            raise ValueError(f"need at least 2 samples to evaluate, got {samples.shape[0]}")
        if not np.isfinite(samples).all():
            return {m: (0.0 if not lower_is_better(m) else math.inf) for m in self.metric_names()}
        if self.kind in ("toy", "swissroll"):
            return self._toy(samples.astype(np.float64))
        out: dict[str, float] = {}
        images = np.clip(samples.astype(np.float32), -1.0, 1.0)
        if self.kind == "stacked":
            labels = self._classifier.predict_channels(images)
            stats = stacked_mode_metrics(labels)
            out.update({"eval/modes": stats["modes"], "eval/kl": stats["kl"]})
        images = images[:FEATURE_CAP]
        if self.kind == "inception":  # one Inception pass for the features and the IS
            fake, probs = self._inception.features_and_probs(images)
            out.update(self._feature_metrics(fake))
            out["eval/is"] = inception_score(probs, splits=min(10, len(probs)))[0]
        else:
            out.update(self._feature_metrics(self.features(images)))
        return out

    def _toy(self, samples: np.ndarray) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._mixture is not None:
            centres, std = self._mixture
            out.update(_prefixed(toy_mode_metrics(samples, centres, std)))
        n = min(len(samples), W1_CAP)
        out["eval/w1"] = wasserstein1_exact(samples[:n], self.toy_reference(n))
        return out

    def _feature_metrics(self, fake: np.ndarray) -> dict[str, float]:
        real = self.reference_features()
        m = compare_features(real, fake, kid_subsets=self.kid_subsets, seed=self.seed)
        return {
            "eval/fid": m["fid"],
            "eval/kid": m["kid_mean"],
            "eval/precision": m["precision"],
            "eval/recall": m["recall"],
            "eval/density": m["density"],
            "eval/coverage": m["coverage"],
        }

    def metric_names(self) -> tuple[str, ...]:
        """The keys `__call__` returns."""
        features = ("eval/fid", "eval/kid", "eval/precision", "eval/recall", "eval/density",
                    "eval/coverage")
        if self.kind == "toy":
            return ("eval/modes", "eval/high_quality", "eval/reverse_kl", "eval/w1")
        if self.kind == "swissroll":
            return ("eval/w1",)
        if self.kind == "stacked":
            return ("eval/modes", "eval/kl", *features)
        if self.kind == "inception":
            return (*features, "eval/is")
        return features


def _normalise(metric: str) -> str:
    return metric if not metric or metric.startswith("eval/") else "eval/" + metric


def _data_dir(config: ml_collections.ConfigDict) -> str:
    import os

    from wgan_jax.config import default_data_dir

    return os.path.expanduser(config.data_dir) if config.data_dir else default_data_dir()


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
) -> Evaluator | None:
    """The evaluator for `config.dataset`, or None (with a warning) when no metric applies.

    `reference_fn(n, seed)` returns n real examples (`DataIterator.reference_samples`).
    `kid_subsets` (100 in torch-fidelity's protocol) trades KID's variance for time.
    Raises `UserError` when `config.eval.inception_weights` names a file that cannot be loaded.
    """
    kind, _, name = config.dataset.partition(":")
    num = int(config.eval.num_samples)
    metric = config.eval.metric
    if kind == "toy":
        if name == "swissroll":
            return Evaluator("swissroll", reference_fn, num_reference=num, seed=seed,
                             metric=metric)
        if name in TOY_MIXTURES:
            return Evaluator("toy", reference_fn, num_reference=num, seed=seed, mixture=name,
                             metric=metric)
        log.warning("evaluation: no metrics for toy dataset %r", name)
        return None
    num = min(num, FEATURE_CAP)
    weights = config.eval.inception_weights
    if kind == "stacked_digits" or kind == "digits" or (config.num_channels == 1 and not weights):
        from wgan_jax.metrics.digits_classifier import DigitClassifier

        classifier = DigitClassifier.load_or_train(_data_dir(config))
        if kind == "stacked_digits":
            return Evaluator("stacked", reference_fn, num_reference=num, seed=seed,
                             feature_fn=_per_channel_features(classifier),
                             classifier=classifier, metric=metric, kid_subsets=kid_subsets)
        return Evaluator("digits", reference_fn, num_reference=num, seed=seed,
                         feature_fn=classifier.features, classifier=classifier, metric=metric,
                         kid_subsets=kid_subsets)
    if not weights:
        log.warning(
            "evaluation: %s has %d channels and config.eval.inception_weights is empty, so no "
            "FID/KID/precision/recall can be computed; set it to the pytorch-fid Inception "
            "weights (pt_inception-2015-12-05-*.pth or an .npz of them) to enable evaluation",
            config.dataset, config.num_channels,
        )
        return None
    extractor = _load_inception(weights)

    def inception_features(images: np.ndarray) -> np.ndarray:
        return extractor.features(images[..., :3])

    return Evaluator("inception", reference_fn, num_reference=num, seed=seed,
                     feature_fn=inception_features, inception=_ThreeChannels(extractor),
                     metric=metric, kid_subsets=kid_subsets)


class _ThreeChannels:
    """Drops an alpha channel before the Inception network (which takes 1 or 3 channels)."""

    def __init__(self, extractor: Any) -> None:
        self._extractor = extractor

    def features_and_probs(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._extractor.features_and_probs(images[..., :3])


def _load_inception(path: str) -> Any:
    import os

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
    from wgan_jax import input_pipeline
    from wgan_jax.step import make_mesh

    return input_pipeline.create_input_pipeline(config, make_mesh()).reference_samples


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

    Uses the EMA generator when the run keeps one (`config.ema_decay > 0`). Pass the trainer's
    `evaluator` to reuse its cached reference features; otherwise one is built here. Returns {}
    when no metric applies to the dataset.
    """
    if evaluator is None:
        evaluator = make_evaluator(config, reference_fn_for(config), seed=seed)
        if evaluator is None:
            return {}
    use_ema = config.ema_decay > 0 and getattr(state, "ema_params", None) is not None
    n = int(num_samples or config.eval.num_samples)
    return evaluator(draw_samples(gan, state, n, seed=seed + 12345, use_ema=use_ema))


def draw_samples(gan: Any, state: Any, num: int, seed: int, use_ema: bool) -> np.ndarray:
    """`num` float32 samples from latents drawn with `seed`, in batches of 1000.

    The one implementation behind `wgan_jax.runs.generate_samples` too.
    """
    import jax

    z = jax.random.normal(jax.random.PRNGKey(seed), (num, gan.z_dim))
    fn = _jitted_generator(gan, use_ema)
    parts = [np.asarray(fn(state, z[i : i + 1000])) for i in range(0, num, 1000)]
    return np.concatenate(parts).astype(np.float32)


_LAST_GENERATOR: list[Any] = []  # [(gan, use_ema, jitted fn)]: the most recent only


def _jitted_generator(gan: Any, use_ema: bool) -> Any:
    """The jitted inference function of `gan`, kept across calls so that the evaluations of a
    training run compile once (a new GAN object, e.g. after a rollback, compiles anew)."""
    import jax

    from wgan_jax.state import apply_generator

    if not (_LAST_GENERATOR and _LAST_GENERATOR[0][0] is gan
            and _LAST_GENERATOR[0][1] == use_ema):
        fn = jax.jit(lambda s, z: apply_generator(gan, s, z, use_ema=use_ema))
        _LAST_GENERATOR[:] = [(gan, use_ema, fn)]
    return _LAST_GENERATOR[0][2]


class EarlyStopping:
    """Stops after `patience` evaluations in a row without improving on the best value.

    `patience` 0 never stops. A non-finite value never counts as an improvement. The state
    (`get_state`/`set_state`) is a small JSON dict, saved with the checkpoint so a resumed run
    decides exactly as an uninterrupted one.
    """

    def __init__(self, patience: int, lower_is_better: bool = True, min_delta: float = 0.0):
        self.patience = int(patience)
        self.lower_is_better = bool(lower_is_better)
        self.min_delta = float(min_delta)
        self.best: float | None = None
        self.bad_evaluations = 0

    def improved(self, value: float) -> bool:
        """Whether `value` beats the best so far by more than `min_delta`."""
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.lower_is_better:
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def update(self, value: float) -> bool:
        """Records one evaluation; True when training should stop now."""
        value = float(value)
        if self.improved(value):
            self.best = value
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
        return self.patience > 0 and self.bad_evaluations >= self.patience

    def get_state(self) -> dict[str, Any]:
        return {"best": self.best, "bad_evaluations": self.bad_evaluations}

    def set_state(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        best = state.get("best")
        self.best = None if best is None else float(best)
        self.bad_evaluations = int(state.get("bad_evaluations", 0))


def make_early_stopping(
    config: ml_collections.ConfigDict, evaluator: Evaluator | None
) -> EarlyStopping | None:
    """`EarlyStopping` on `evaluator.metric`, or None when evaluation or patience is off."""
    if evaluator is None or not config.eval_every or config.early_stopping.patience <= 0:
        return None
    return EarlyStopping(config.early_stopping.patience, lower_is_better(evaluator.metric))
