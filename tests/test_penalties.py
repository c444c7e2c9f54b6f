"""The gradient penalty against closed forms and finite differences; the other penalties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from wgan_jax import penalties


def linear_critic(w):
    return lambda x: x.reshape(x.shape[0], -1) @ w


def gradient_penalty(critic_fn, x_hat, **kwargs):
    """mean((||grad D(x_hat)|| - target)^2) at given points, from the public pieces."""
    return penalties.penalty_from_norms(penalties.input_gradient_norms(critic_fn, x_hat),
                                        **kwargs)


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5])
def test_linear_critic_penalty_and_gradient_match_closed_form(scale):
    w = scale * jax.random.normal(jax.random.PRNGKey(0), (12,))
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 3, 4))  # non-batch axes are flattened
    norm = jnp.linalg.norm(w)

    def pen(w):
        return gradient_penalty(linear_critic(w), x)

    value, grad = jax.value_and_grad(pen)(w)
    np.testing.assert_allclose(value, (norm - 1.0) ** 2, rtol=1e-5)
    np.testing.assert_allclose(grad, 2.0 * (norm - 1.0) * w / norm, rtol=1e-4, atol=1e-6)
    one_sided = gradient_penalty(linear_critic(w), x, one_sided=True)
    np.testing.assert_allclose(one_sided, max(0.0, float(norm) - 1.0) ** 2, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", [1.0, 0.5])
def test_constant_critic_gives_target_squared_with_finite_gradient(target):
    x = jax.random.normal(jax.random.PRNGKey(2), (4, 8, 8, 3))

    def pen(b):
        return gradient_penalty(lambda inp: 0.0 * jnp.sum(inp, (1, 2, 3)) + b, x,
                                          target=target)

    value, grad = jax.value_and_grad(pen)(jnp.float32(3.0))
    np.testing.assert_allclose(value, target**2, rtol=1e-6)
    assert np.isfinite(grad)

    # A critic that depends on its weights but is flat in x at these points: zero input
    # gradient, and the gradient w.r.t. the weights must still be finite (not 0/0 = NaN).
    def pen_w(w):
        return gradient_penalty(lambda inp: jnp.sum(jax.nn.relu(inp - 100.0) * w,
                                                              (1, 2, 3)), x, target=target)

    value, grad = jax.value_and_grad(pen_w)(jnp.ones((8, 8, 3)))
    np.testing.assert_allclose(value, target**2, rtol=1e-6)
    assert np.all(np.isfinite(grad))


@pytest.mark.slow
def test_mlp_critic_penalty_gradient_matches_central_differences_float64():
    with jax.enable_x64(True):
        k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(3), 4)
        params = {
            "w1": jax.random.normal(k1, (3, 16), jnp.float64) * 0.7,
            "b1": jax.random.normal(k2, (16,), jnp.float64) * 0.1,
            "w2": jax.random.normal(k3, (16, 1), jnp.float64) * 0.7,
        }
        x = jax.random.normal(k4, (6, 3), jnp.float64)

        def critic(p):
            return lambda inp: (jnp.tanh(inp @ p["w1"] + p["b1"]) @ p["w2"])[:, 0]

        def pen(flat):
            return gradient_penalty(critic(unravel(flat)), x)

        flat, unravel = jax.flatten_util.ravel_pytree(params)
        grad = jax.grad(pen)(flat)
        eps = 1e-6
        fd = np.array([
            (pen(flat.at[i].add(eps)) - pen(flat.at[i].add(-eps))) / (2 * eps)
            for i in range(flat.size)
        ])
        np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-9)


def test_interpolate_draws_one_uniform_alpha_per_example():
    real = jnp.zeros((1000, 4, 4, 2))
    fake = jnp.ones((1000, 4, 4, 2))
    x_hat = penalties.interpolate(jax.random.PRNGKey(0), real, fake)
    per_example = np.asarray(x_hat).reshape(1000, -1)
    # one alpha per example: constant within an example ...
    assert np.all(per_example.max(1) - per_example.min(1) < 1e-7)
    alpha = per_example[:, 0]
    # ... and U[0, 1] across examples (not a normal, not clipped)
    assert alpha.min() >= 0.0 and alpha.max() <= 1.0
    assert abs(alpha.mean() - 0.5) < 0.05 and abs(alpha.var() - 1 / 12) < 0.01


def test_safe_norm_is_exact_and_has_finite_gradient_at_zero():
    x = jnp.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(penalties.safe_norm(x, axis=1), [5.0, 0.0])
    grad = jax.grad(lambda v: jnp.sum(penalties.safe_norm(v, axis=1)))(x)
    np.testing.assert_allclose(grad, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)


def test_r1_of_linear_critic_is_squared_weight_norm():
    w = jnp.array([1.0, -2.0, 2.0])
    x = jax.random.normal(jax.random.PRNGKey(5), (7, 3))
    np.testing.assert_allclose(penalties.r1(linear_critic(w), x)[0], 9.0, rtol=1e-6)


def test_dragan_penalty_of_linear_critic_matches_closed_form():
    w = jnp.array([0.5, 0.5, 0.5, 0.5])
    x = jax.random.normal(jax.random.PRNGKey(6), (9, 4))
    draws = penalties.draw(jax.random.PRNGKey(7), x, noise=True)
    value, _ = penalties.dragan(linear_critic(w), x, None, draws)
    np.testing.assert_allclose(value, 0.0, atol=1e-10)  # |w| = 1 everywhere


def test_deprecated_names_warn_and_agree_with_the_one_name_per_penalty():
    w = jnp.array([1.0, -2.0, 2.0])
    critic = linear_critic(w)
    real = jax.random.normal(jax.random.PRNGKey(8), (6, 3))
    fake = jax.random.normal(jax.random.PRNGKey(9), (6, 3))
    key = jax.random.PRNGKey(10)
    x_hat = penalties.interpolate(key, real, fake)
    with pytest.warns(DeprecationWarning, match="gradient_penalty"):
        old = penalties.gradient_penalty(critic, x_hat, target=0.5)
    np.testing.assert_allclose(old, gradient_penalty(critic, x_hat, target=0.5), rtol=1e-6)
    np.testing.assert_allclose(old, (3.0 - 0.5) ** 2, rtol=1e-5)  # |w| = 3 everywhere
    with pytest.warns(DeprecationWarning, match="r1_penalty"):
        old = penalties.r1_penalty(critic, real)
    np.testing.assert_allclose(old, penalties.r1(critic, real)[0], rtol=1e-6)
    with pytest.warns(DeprecationWarning, match="dragan_penalty"):
        old = penalties.dragan_penalty(critic, real, key, target=2.0)
    np.testing.assert_allclose(old, (3.0 - 2.0) ** 2, rtol=1e-5)


def test_clip_weights_keeps_params_in_range():
    tx = optax.chain(optax.sgd(1.0), penalties.clip_weights(0.01))
    params = {"w": jnp.array([0.0, 0.005, -0.2])}
    state = tx.init(params)
    updates, state = tx.update({"w": jnp.array([-1.0, 0.001, 0.1])}, state, params)
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(new["w"], [0.01, 0.004, -0.01], rtol=1e-6)


def _quadratic_critic(a):
    """D(x) = 0.5 * sum(a * x^2) per example: input gradient a * x (closed form)."""
    return lambda x: 0.5 * jnp.sum(a * jnp.square(x), axis=tuple(range(1, x.ndim)))


def test_r2_and_r1r2_match_the_closed_form_of_a_quadratic_critic():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32)
    real = rng.normal(size=(5, 2, 3)).astype(np.float32)
    fake = rng.normal(size=(5, 2, 3)).astype(np.float32)
    a64, real64, fake64 = (np.asarray(v, np.float64) for v in (a, real, fake))
    r1_ref = np.mean(np.sum(np.square(a64 * real64), axis=(1, 2)))
    r2_ref = np.mean(np.sum(np.square(a64 * fake64), axis=(1, 2)))
    draws = penalties.Draws(jnp.full((5,), 0.5))
    critic = _quadratic_critic(jnp.asarray(a))
    value, norms = penalties.PENALTIES["r2"](critic, real, fake, draws)
    np.testing.assert_allclose(value, r2_ref, rtol=1e-5)
    np.testing.assert_allclose(norms, np.sqrt(np.sum(np.square(a64 * fake64), axis=(1, 2))),
                               rtol=1e-5)
    value, norms = penalties.PENALTIES["r1r2"](critic, real, fake, draws)
    np.testing.assert_allclose(value, r1_ref + r2_ref, rtol=1e-5)
    assert norms.shape == (10,)
    # zero-centred: the target is ignored (a "gp"-style penalty would change with it)
    np.testing.assert_allclose(
        penalties.r1r2(critic, real, fake, draws, target=3.0)[0], r1_ref + r2_ref, rtol=1e-5)


def test_r2_of_linear_critic_is_squared_weight_norm():
    w = jnp.array([1.0, -2.0, 2.0])
    x = jax.random.normal(jax.random.PRNGKey(8), (7, 3))
    draws = penalties.Draws(jnp.zeros((7,)))
    np.testing.assert_allclose(penalties.r2(linear_critic(w), x, x, draws)[0], 9.0, rtol=1e-6)
