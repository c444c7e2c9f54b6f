"""Losses as pure functions of scores."""

import jax.numpy as jnp
import numpy as np

from wgan_jax import losses

REAL = jnp.array([2.0, 0.0, 1.0])
FAKE = jnp.array([-1.0, 0.5, -2.0])


def test_wasserstein():
    expected = -2.5 / 3 - 1.0
    np.testing.assert_allclose(losses.wasserstein_critic_loss(REAL, FAKE), expected, rtol=1e-6)
    np.testing.assert_allclose(losses.wasserstein_generator_loss(FAKE), 2.5 / 3, rtol=1e-6)


def test_hinge():
    expected = np.mean([0.0, 1.0, 0.0]) + np.mean([0.0, 1.5, 0.0])
    np.testing.assert_allclose(losses.hinge_critic_loss(REAL, FAKE), expected, rtol=1e-6)


def test_logistic_matches_binary_cross_entropy():
    p_real, p_fake = 1 / (1 + np.exp(-np.asarray(REAL))), 1 / (1 + np.exp(-np.asarray(FAKE)))
    bce = -np.mean(np.log(p_real)) - np.mean(np.log(1 - p_fake))
    np.testing.assert_allclose(losses.logistic_critic_loss(REAL, FAKE), bce, rtol=1e-5)
    np.testing.assert_allclose(
        losses.logistic_generator_loss(FAKE), -np.mean(np.log(p_fake)), rtol=1e-5
    )
    # stable for huge logits
    assert np.isfinite(losses.logistic_critic_loss(jnp.array([1e4]), jnp.array([-1e4])))
