"""Sample-quality evaluation of a generator: one small evaluator per family of metrics.

The run's metric plan (`EvalPlan`, see `wgan_jax.eval_plan`: which metrics, on which feature
space) is decided from the config and the run's class count, once, in an `EvalSpec`
(`EvalSpec.from_config`, the one entry that reads a config); `make_evaluator(spec,
reference_fn)` (`common.py`) builds the evaluator, `from_plan` choosing the evaluators, and a
composite `Evaluator` (`composite.py`) runs them on the same samples and merges their
`{"eval/...": float}`:

* `toy.py`: toy mixtures (ring8, grid25, 8gaussians, 25gaussians): modes, high_quality and
  reverse_kl (the VEEGAN / PacGAN protocol); any 2-D data (a swiss roll too): w1, the exact
  Wasserstein-1 distance to as many real samples (at most `W1_CAP`);
* `features.py`: fid, kid, precision, recall, density, coverage in a feature space, named after
  it (`eval/fid_digits` on the hidden features of the small digit classifier, trained once
  offline and cached under the data directory; `eval/fid_inception` etc. plus `eval/is` on
  FID-Inception pool3 features from `config.eval.inception_weights`); the feature functions
  are in `spaces.py` (RGB `digits` are read on the mean of their channels, RGBA sprites on
  their alpha (ink) channel);
* `stacked.py`: stacked_digits: modes (of 1000) and kl of the per-channel digit triples;
* `conditional.py`: class-conditional runs: `eval/label_accuracy` (digits: with the per-class
  FID `eval/fid_digits_class_mean` / `_worst` / `_worst_label`; stacked_digits: all three
  digits must match). Conditional samples are generated for labels in the data's class
  frequencies (`Evaluator.sample_labels`, the same labels for a seed).

`run.py`: `evaluate_state` samples a train state (EMA weights when the run keeps them) with
the one jitted generator of `wgan_jax.sampling` and evaluates. Which metric is better which
way, and which one ranks evaluations, is `wgan_jax.metrics.ranking`'s rule. Everything here
is deterministic for fixed seeds.
"""

from wgan_jax.evaluators.base import Samples
from wgan_jax.evaluators.common import EvalSpec, from_plan, make_evaluator
from wgan_jax.evaluators.composite import Evaluator
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
from wgan_jax.evaluators.run import evaluate_state, evaluator_for_data
from wgan_jax.evaluators.spaces import digit_features, digit_ink, load_inception
from wgan_jax.evaluators.stacked import StackedDigitsEvaluator
from wgan_jax.evaluators.toy import W1_CAP, ModeEvaluator, W1Evaluator

__all__ = [
    "FEATURE_CAP",
    "W1_CAP",
    "ClassEvaluator",
    "EvalSpec",
    "Evaluator",
    "FeatureEvaluator",
    "FeatureSpace",
    "InceptionEvaluator",
    "ModeEvaluator",
    "Samples",
    "StackedDigitsEvaluator",
    "StackedLabelEvaluator",
    "W1Evaluator",
    "digit_features",
    "digit_ink",
    "evaluate_state",
    "evaluator_for_data",
    "from_plan",
    "heldout_label_accuracy",
    "load_inception",
    "make_evaluator",
]
