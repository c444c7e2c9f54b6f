"""The evaluators package: evaluation and `sample` share one jitted generator, and evaluators
that read the same features (the feature metrics and a conditional run's class metrics) share
one pass of the feature function per evaluation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax

from wgan_jax import evaluators, runs, sampling
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.eval_plan import eval_plan
from wgan_jax.metrics.conditional import label_accuracy
from wgan_jax.state import GAN, create_train_state


def _plan(config):
    return eval_plan(config, num_classes(DataSpec.from_config(config)))


def _counting_gan() -> tuple[GAN, list[int], object]:
    """A linear generator that records each time it is traced, its state, and the records."""
    traces: list[int] = []

    def apply(params, state, z, *, train, rng=None):
        traces.append(z.shape[0])
        return z @ params["w"], state

    generator = (lambda rng, z: ({"w": jnp.ones((z.shape[-1], 2))}, {}), apply)
    critic = (lambda rng, x: ({"v": jnp.ones((2,))}, {}),
              lambda p, s, x, *, train, rng=None: (x @ p["v"], s))
    gan = GAN(generator, critic, optax.adam(1e-3), optax.adam(1e-3), z_dim=3)
    state = create_train_state(gan, (2,), 0, False)
    traces.clear()  # the door's shape checks traced it too
    return gan, traces, state


def test_evaluation_and_sample_share_one_compiled_generator():
    gan, traces, state = _counting_gan()
    config = get_config_schema()
    out = evaluators.evaluate_state(evaluators.EvalSpec.from_config(config), gan, state,
                                    num_samples=7,
                                    evaluator=lambda samples: {"eval/n": float(len(samples))})
    samples = runs.generate_samples(gan, state, 7, seed=1)
    assert out == {"eval/n": 7.0} and samples.shape == (7, 2)
    assert traces == [7]  # one program for both
    assert sampling.jitted_generator(gan, False) is sampling.jitted_generator(gan, False)
    assert sampling.jitted_generator(gan, True) is not sampling.jitted_generator(gan, False)
    other, other_traces, _ = _counting_gan()  # a new GAN (a rollback's) compiles anew
    sampling.generate_from_latents(other, state, jnp.zeros((7, 3)), False)
    assert other_traces == [7] and traces == [7]


class _Reader:
    """A stand-in digit classifier on 2x2 images: the pixels are the features, class 1 when
    bright; records how many images each feature pass reads."""

    def __init__(self) -> None:
        self.passes: list[int] = []

    def features(self, images):
        self.passes.append(len(images))
        return images.reshape(len(images), -1).astype(np.float64)

    def logits_from_features(self, features):
        return np.stack([-features.mean(axis=1), features.mean(axis=1)], axis=1)


def test_feature_and_class_metrics_share_one_feature_pass():
    config = get_config_schema()
    apply_overrides(config, {"dataset": "digits", "image_size": 2, "num_channels": 1,
                             "model.conditional": "projection", "eval_every": 0})
    plan = _plan(config)
    rng = np.random.default_rng(0)
    real = rng.uniform(-1, 1, (200, 2, 2, 1)).astype(np.float32)
    real_labels = (real.mean(axis=(1, 2, 3)) > 0).astype(np.int32)
    reader = _Reader()
    ev = evaluators.from_plan(
        plan, lambda n, seed: real[:n], num_samples=200, classifier=reader, kid_subsets=2,
        reference_labels=lambda n, seed: real_labels[:n],
        class_frequencies=(0.5, 0.5) + (0.0,) * 8)
    fake = rng.uniform(-1, 1, (100, 2, 2, 1)).astype(np.float32)
    labels = np.arange(100, dtype=np.int32) % 2
    out = ev(fake, labels)
    assert reader.passes == [100, 200]  # the samples once, the reference once
    assert list(out) == [k for k in plan.names if k in out] and set(out) == set(plan.names)
    read = (fake.mean(axis=(1, 2, 3)) > 0).astype(np.int32)
    assert out["eval/label_accuracy"] == label_accuracy(read, labels)
    assert ev(fake, labels) == out and reader.passes == [100, 200, 100]  # reference cached
