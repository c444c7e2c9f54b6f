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


def test_rpgan_pairs_real_and_fake_by_position_float64_reference():
    real, fake = np.asarray(REAL, np.float64), np.asarray(FAKE, np.float64)
    critic = np.mean(np.log1p(np.exp(fake - real)))  # softplus(D(fake_i) - D(real_i))
    generator = np.mean(np.log1p(np.exp(real - fake)))
    np.testing.assert_allclose(losses.rpgan_critic_loss(REAL, FAKE), critic, rtol=1e-6)
    np.testing.assert_allclose(losses.rpgan_generator_loss(FAKE, REAL), generator, rtol=1e-6)
    # pairs, not means: permuting the fakes changes the loss (a mean-based loss would not)
    assert abs(float(losses.rpgan_critic_loss(REAL, FAKE[::-1])) - critic) > 1e-3
    # stable for huge score gaps (softplus, not log(1 + exp))
    assert np.isfinite(losses.rpgan_critic_loss(jnp.array([-1e4]), jnp.array([1e4])))
    assert losses.CRITIC_LOSSES["rpgan"] is losses.rpgan_critic_loss
    assert losses.GENERATOR_LOSSES["rpgan"] is losses.rpgan_generator_loss
    assert "rpgan" in losses.PAIRED_LOSSES
