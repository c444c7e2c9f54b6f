"""Jacobian-based truncation (`wgan_jax.jacobian_truncation`): the Jacobian norms against
closed forms, the latents kept, and evaluation sampling through `config.sampling`."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wgan_jax import jacobian_truncation as jt
from wgan_jax.config import get_config_schema
from wgan_jax.evaluators import EvalSpec, evaluate_state, evaluator_for_data
from wgan_jax.state import TrainState


def _function_gan(fn, z_dim: int = 2):
    """A GAN-shaped namespace whose generator is `fn(params, z)` (no state, no EMA)."""
    generator = SimpleNamespace(apply=lambda params, state, z, train: (fn(params, z), state))
    gan = SimpleNamespace(generator=generator, num_classes=0, z_dim=z_dim)
    state = TrainState(step=jnp.int32(0), g_params=jnp.float32(1.0), g_state={}, d_params={},
                       d_state={}, g_opt_state={}, d_opt_state={}, ema_params=None,
                       rng=jnp.zeros(2, jnp.uint32))
    return gan, state


def _grid_steps(params, z):
    """Each coordinate a sum of 4 steep tanh steps: plateaus at -4, -2, 0, 2, 4 (the grid25
    modes) joined by narrow ramps, like a trained generator's bridges between modes."""
    steps = jnp.array([-1.2, -0.4, 0.4, 1.2])
    return params * jnp.sum(jnp.tanh(15.0 * (z[..., None] - steps)), axis=-1)


def test_squared_frobenius_norms_match_closed_forms():
    z = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (37, 3)), np.float64)
    gan, state = _function_gan(lambda p, v: p * v * jnp.abs(v), z_dim=3)  # dG_i/dz_i = 2|z_i|
    np.testing.assert_allclose(jt.jacobian_sq_norms(gan, state, z, False),
                               4 * np.sum(z**2, axis=1), rtol=1e-5)
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 7  # a linear map: ||W||_F^2 everywhere
    gan, state = _function_gan(lambda p, v: p * v @ w.T, z_dim=3)
    np.testing.assert_allclose(jt.jacobian_sq_norms(gan, state, z, False),
                               np.full(37, np.sum(w.astype(np.float64) ** 2)), rtol=1e-5)


def test_the_smoothest_latents_are_kept_in_their_drawn_order():
    gan, state = _function_gan(_grid_steps)
    key = jax.random.PRNGKey(3)
    z = jt.truncated_latents(gan, state, key, 90, 0.25, use_ema=False)
    candidates = np.asarray(jax.random.normal(key, (jt.num_candidates(90, 0.25), 2)))
    assert len(candidates) == 120
    ramps = 15.0 * (1 - np.tanh(15.0 * (candidates[..., None] - [-1.2, -0.4, 0.4, 1.2])) ** 2)
    norms = np.sum(np.sum(ramps, axis=-1) ** 2, axis=1)  # the diagonal Jacobian, by hand
    expected = candidates[np.sort(np.argsort(norms)[:90])]
    np.testing.assert_allclose(np.asarray(z), expected)
    plain = jt.truncated_latents(gan, state, key, 90, 0.0, use_ema=False)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(jax.random.normal(key, (90, 2))))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        jt.num_candidates(10, 1.0)


def test_evaluation_samples_through_the_configs_jacobian_truncation(caplog):
    caplog.set_level(logging.INFO, logger="wgan_jax")
    gan, state = _function_gan(_grid_steps)
    config = get_config_schema()
    config.dataset = "toy:grid25"
    scores = {}
    for fraction in (0.0, 0.2):
        config.sampling.jacobian_truncation = fraction
        spec = EvalSpec.from_config(config)
        scores[fraction] = evaluate_state(spec, gan, state, evaluator=evaluator_for_data(spec),
                                          num_samples=2000)
    # The ramps between plateaus hold ~20% of the latents; dropping them lifts the share of
    # samples near a mode, which the evaluator reports for the config's setting.
    assert scores[0.0]["eval/high_quality"] < 0.9
    assert scores[0.2]["eval/high_quality"] > scores[0.0]["eval/high_quality"] + 0.05
    assert scores[0.2]["eval/modes"] == 25
    said = [r.getMessage() for r in caplog.records if "steepest" in r.getMessage()]
    assert said == ["evaluation samples: the 20.0% of latents where the generator is steepest "
                    "are dropped (config.sampling.jacobian_truncation)"]
