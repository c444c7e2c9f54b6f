"""Your own class-conditional networks: they get the labels as `labels=`, give the same first
iteration on 1 and 8 devices, learn to follow their labels in an own loop, and train through
the trainer (`model.conditional="labels"`)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import run_json

TESTS = os.path.dirname(os.path.abspath(__file__))
RUN = f"import sys; sys.path.insert(0, {TESTS!r})\n" + r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
from flax import nnx
from own_nets import ConditionalNNXCritic, ConditionalNNXGenerator
from wgan_jax.state import GAN, apply_generator, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_batches, place_state

K = 4
CENTRES = np.float32([[2, 2], [-2, 2], [-2, -2], [2, -2]])
mesh = make_mesh()
adam = optax.adam(1e-3, b1=0.5, b2=0.9)
gan = GAN(ConditionalNNXGenerator(4, K, rngs=nnx.Rngs(0)),
          ConditionalNNXCritic(2, K, rngs=nnx.Rngs(1)), adam, adam, z_dim=4, num_classes=K)
state = place_state(create_train_state(gan, (2,), seed=0, ema=False), mesh)
step = make_train_step(StepConfig(n_critic=2, class_frequencies=(1 / K,) * K), mesh, gan)
data = np.random.default_rng(0)


def batch():
    labels = data.integers(0, K, size=(2, 64)).astype(np.int32)
    points = CENTRES[labels] + 0.2 * data.normal(size=(2, 64, 2)).astype(np.float32)
    return place_batches((points, labels), mesh)


state, metrics = step(state, batch())
out = {"first": {k: float(v) for k, v in metrics.items()}}
if sys.argv[1:] == ["train"]:
    for _ in range(int(600)):
        state, metrics = step(state, batch())
        assert np.isfinite(float(metrics["critic_loss"]))  # read every step, as a user would
    labels = jnp.arange(400, dtype=jnp.int32) % K
    z = jax.random.normal(jax.random.PRNGKey(9), (400, 4))
    samples = np.asarray(apply_generator(gan, state, z, labels=labels))
    nearest = np.argmin(((samples[:, None] - CENTRES[None]) ** 2).sum(-1), axis=1)
    out["label_accuracy"] = float(np.mean(nearest == np.asarray(labels)))
print(json.dumps(out))
"""

KEYS = ("critic_loss", "generator_loss", "gradient_penalty", "wasserstein_estimate",
        "grad_norm/critic", "grad_norm/generator")


@pytest.mark.slow
def test_own_conditional_networks_first_iteration_on_1_and_8_devices_and_labels_followed():
    one = run_json(RUN, "train", devices=1)
    eight = run_json(RUN, devices=8)
    for key in KEYS:
        np.testing.assert_allclose(eight["first"][key], one["first"][key], rtol=1e-4,
                                   err_msg=key)
    # A generator that ignored its labels would put ~1/4 of the samples at their label's
    # centre; this one puts nearly all there.
    assert one["label_accuracy"] > 0.9, one["label_accuracy"]


@pytest.mark.slow
def test_own_conditional_networks_through_the_trainer(tmp_path):
    import jax.numpy as jnp
    from flax import nnx
    from own_nets import ConditionalNNXCritic, ConditionalNNXGenerator

    from wgan_jax.config import apply_overrides, get_config_schema
    from wgan_jax.errors import ConfigError
    from wgan_jax.train import train_and_evaluate

    config = get_config_schema()
    apply_overrides(config, {
        "dataset": "digits", "image_size": 8, "num_channels": 1, "global_batch_size": 16,
        "n_critic": 2, "num_iterations": 2, "sample_every": 0, "plot_every": 0,
        "model.z_dim": 8, "model.conditional": "labels",
    })
    generator = ConditionalNNXGenerator(8, 10, out_dim=64, rngs=nnx.Rngs(0))

    class Reshaped(nnx.Module):
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, z, labels):
            return jnp.tanh(self.inner(z, labels)).reshape((z.shape[0], 8, 8, 1))

    critic = ConditionalNNXCritic(64, 10, rngs=nnx.Rngs(1))
    summary = train_and_evaluate(config, str(tmp_path / "run"), generator=Reshaped(generator),
                                 critic=critic)
    assert summary["step"] == 2 and math.isfinite(summary["metrics"]["critic_loss"])
    # The same networks named by factories in the config (as the CLI would load them).
    factories = config.copy_and_resolve_references()
    apply_overrides(factories, {"model.generator": "own_nets:conditional_generator",
                                "model.critic": "own_nets:conditional_critic",
                                "model.num_classes": 10})
    summary = train_and_evaluate(factories, str(tmp_path / "factories"))
    assert summary["step"] == 2 and math.isfinite(summary["metrics"]["critic_loss"])
    config.model.conditional = "projection"
    with pytest.raises(ConfigError, match="conditional='labels'"):
        train_and_evaluate(config, str(tmp_path / "other"), generator=Reshaped(generator),
                           critic=critic)
    assert not (tmp_path / "other").exists()
