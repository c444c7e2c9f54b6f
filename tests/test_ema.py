"""The generator EMA: warm-up decay min(d, (1 + t) / (10 + t)), in closed form."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, ema_warmup_decay, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate


def test_warmup_decay_values():
    np.testing.assert_allclose(ema_warmup_decay(0.999, 0), 0.1)
    np.testing.assert_allclose(ema_warmup_decay(0.999, 10), 11 / 20)
    np.testing.assert_allclose(ema_warmup_decay(0.99, 10_000), 0.99)


def test_ema_after_two_steps_matches_the_closed_form():
    c = get_config_schema()
    c.dataset = "toy:8gaussians"
    c.model.width = 16
    c.global_batch_size = 8
    c.n_critic = 1
    c.ema_decay = 0.999
    mesh = make_mesh()
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, 0, True), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    expected = jax.tree.map(np.asarray, state.g_params)
    rng = np.random.default_rng(0)
    for t in range(2):
        real = rng.normal(size=(1, 8, *shape)).astype(np.float32)
        state, _ = step(state, jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
        d = (1 + t) / (10 + t)
        expected = jax.tree.map(lambda e, p, d=d: d * e + (1 - d) * np.asarray(p), expected,
                                state.g_params)
    for e, got in zip(jax.tree.leaves(expected), jax.tree.leaves(state.ema_params), strict=True):
        np.testing.assert_allclose(np.asarray(got), e, rtol=1e-6, atol=1e-7)
