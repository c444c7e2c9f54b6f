"""The evaluator picks the right metrics per dataset and they separate good from bad samples."""

from __future__ import annotations

import numpy as np
import pytest

from wgan_jax import evaluators
from wgan_jax.config import get_config_schema
from wgan_jax.data import toy
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.eval_plan import eval_plan
from wgan_jax.evaluators import EvalSpec, make_evaluator


def _plan(config):
    return eval_plan(config, num_classes(DataSpec.from_config(config)))


def _config(dataset: str, **kw):
    c = get_config_schema()
    c.dataset = dataset
    c.eval.num_samples = 1000
    for key, value in kw.items():
        c[key] = value
    return c


def _toy_reference(name: str):
    return lambda n, seed: toy.toy_samples(name, n, seed + 1000)


@pytest.mark.parametrize("name, modes", [("ring8", 8), ("grid25", 25)])
def test_toy_true_mixture_vs_collapsed(name, modes):
    ev = make_evaluator(EvalSpec.from_config(_config(f"toy:{name}")), _toy_reference(name))
    assert ev.default_metric == "eval/w1" and ev.metric == "eval/w1"
    good = ev(toy.toy_samples(name, 1000, seed=5))
    assert set(good) == {"eval/modes", "eval/high_quality", "eval/reverse_kl", "eval/w1"}
    assert good["eval/modes"] == modes
    # Within 3 std in 2-D (Rayleigh): 1 - exp(-4.5) = 98.9% of a true mixture's samples.
    assert good["eval/high_quality"] == pytest.approx(1 - np.exp(-4.5), abs=0.01)
    assert good["eval/reverse_kl"] < 0.05

    centres, std = toy.MIXTURES[name]
    rng = np.random.default_rng(0)
    collapsed = centres()[:2][rng.integers(0, 2, 1000)] + rng.normal(0, std, (1000, 2))
    bad = ev(collapsed)
    assert bad["eval/modes"] == 2
    assert bad["eval/reverse_kl"] == pytest.approx(np.log(modes / 2), abs=0.02)
    assert bad["eval/w1"] > 5 * good["eval/w1"]


def test_toy_evaluation_is_deterministic_and_handles_nonfinite():
    ev = make_evaluator(EvalSpec.from_config(_config("toy:ring8")), _toy_reference("ring8"))
    samples = toy.toy_samples("ring8", 300, seed=1)
    assert ev(samples) == ev(samples)
    broken = samples.copy()
    broken[3] = np.nan
    out = ev(broken)
    assert out["eval/w1"] == np.inf and out["eval/modes"] == 0


def test_swissroll_has_only_w1():
    ev = make_evaluator(EvalSpec.from_config(_config("toy:swissroll")), _toy_reference("swissroll"))
    out = ev(toy.toy_samples("swissroll", 400, seed=3))
    assert set(out) == {"eval/w1"} and 0 < out["eval/w1"] < 0.3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One data directory per module, so the digit classifier is trained and cached once."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def digits_data():
    from wgan_jax.data import digits
    from wgan_jax.data.images import to_float

    grey, labels = digits.digits_images(16)
    return to_float(grey[..., None]), labels


def test_digits_real_vs_real_small_real_vs_noise_large(data_dir, digits_data):
    images, _ = digits_data
    perm = np.random.default_rng(0).permutation(len(images))
    half_a, half_b = images[perm[:800]], images[perm[800:1600]]
    config = _config("digits", image_size=16, data_dir=str(data_dir))
    config.eval.num_samples = 800
    ev = make_evaluator(EvalSpec.from_config(config), lambda n, seed: half_a[:n], kid_subsets=10)
    assert ev.kind == "digits" and ev.default_metric == "eval/fid_digits"
    real = ev(half_b)
    assert set(real) == set(ev.metric_names())
    noise = ev(np.random.default_rng(1).uniform(-1, 1, half_b.shape).astype(np.float32))
    assert real["eval/fid_digits"] * 10 < noise["eval/fid_digits"]
    assert real["eval/kid_digits"] < noise["eval/kid_digits"]
    assert real["eval/precision_digits"] > 0.5 and real["eval/recall_digits"] > 0.5
    assert noise["eval/precision_digits"] < 0.05 and noise["eval/coverage_digits"] < 0.05
    assert (data_dir / "digits_classifier_v1.npz").exists()  # cached under config.data_dir


def test_stacked_digits_modes_and_kl(data_dir, digits_data):
    images, labels = digits_data
    config = _config("stacked_digits", image_size=16, num_channels=3, data_dir=str(data_dir))
    config.eval.num_samples = 500
    rng = np.random.default_rng(0)

    def stack(idx):
        return np.concatenate([images[idx[:, c]] for c in range(3)], axis=-1)

    ev = make_evaluator(EvalSpec.from_config(config),
                        lambda n, seed: stack(rng.integers(0, len(images), (n, 3))), kid_subsets=10)
    assert ev.kind == "stacked"
    diverse = ev(stack(np.random.default_rng(2).integers(0, len(images), (2000, 3))))
    assert diverse["eval/modes"] > 800  # of 1000; 2000 uniform draws cover ~865
    ones = np.flatnonzero(labels == 1)
    collapsed = ev(stack(ones[np.random.default_rng(3).integers(0, len(ones), (2000, 3))]))
    assert collapsed["eval/modes"] < 10
    assert collapsed["eval/kl"] > diverse["eval/kl"] + 4
    assert collapsed["eval/fid_digits"] > diverse["eval/fid_digits"]


def test_rgb_without_inception_weights_warns_and_returns_none(caplog):
    config = _config("folder:/nowhere", num_channels=3)
    with caplog.at_level("WARNING", logger="wgan_jax"):
        assert make_evaluator(EvalSpec.from_config(config), lambda n, seed: None) is None
    assert "inception_weights" in caplog.text


def test_rgb_with_missing_inception_weights_is_a_user_error():
    from wgan_jax.errors import UserError

    config = _config("folder:/nowhere", num_channels=3)
    config.eval.inception_weights = "/no/such/weights.pth"
    with pytest.raises(UserError, match="inception_weights"):
        make_evaluator(EvalSpec.from_config(config), lambda n, seed: None)


def test_early_stopping_and_the_checkpointer_agree_on_directions():
    from wgan_jax import checkpoint_best, policies

    config = get_config_schema()
    config.eval_every, config.early_stopping.patience = 10, 3
    for metric in ("eval/fid", "eval/kid", "eval/w1", "eval/reverse_kl", "eval/kl", "eval/modes",
                   "eval/high_quality", "eval/precision", "eval/recall", "eval/density",
                   "eval/coverage", "eval/is"):
        early = policies.make_early_stopping(metric, patience=config.early_stopping.patience,
                                             eval_every=config.eval_every)
        assert early.lower_is_better == checkpoint_best.lower_is_better(metric), metric


class _FakeInception:
    """Stands in for the FID Inception network: mean colour features, 4 'classes'."""

    def features_and_probs(self, images):
        feats = np.concatenate([images.mean(axis=(1, 2)), images.std(axis=(1, 2))], axis=1)
        logits = feats[:, :3] @ np.ones((3, 4)) * np.arange(4)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        return feats, probs / probs.sum(axis=1, keepdims=True)

    def features(self, images):
        return self.features_and_probs(images)[0]


def test_inception_kind_wiring():
    rng = np.random.default_rng(0)
    real = rng.uniform(-1, 1, (300, 8, 8, 4)).astype(np.float32)
    fake_extractor = _FakeInception()
    config = _config("folder:/rgba", num_channels=4, eval_every=0)
    config.eval.inception_weights = "weights.pth"  # not loaded: the extractor is given
    ev = evaluators.from_plan(_plan(config), lambda n, seed: real[:n],
                              num_samples=300, extractor=fake_extractor, kid_subsets=5)
    out = ev(rng.uniform(-1, 1, (300, 8, 8, 4)).astype(np.float32))
    assert set(out) == set(ev.metric_names()) and "eval/is" in out
    zeros = ev(np.zeros((300, 8, 8, 4), np.float32))
    assert out["eval/fid_inception"] < zeros["eval/fid_inception"]
