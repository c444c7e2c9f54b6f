"""DRAGAN against an independent numpy computation, with a non-linear critic.

The critic is a small tanh network whose input gradient is written out by hand in float64 numpy,
so the penalty at any point is known without JAX; the perturbed points are rebuilt from the
noise, the per-example alpha and the batch's standard deviation. `dragan` with its draws from a
key (`penalties.draw(key, real, noise=True)`): the points it differentiates at are caught from
inside the critic (a debug callback), then checked to be DRAGAN's perturbations and the returned
penalty recomputed from them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wgan_jax import penalties

B, D, H = 16, 6, 12


def _weights():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(D, H)) / np.sqrt(D), rng.normal(size=H) * 0.3,
            rng.normal(size=H) * 2.0)


def _critic(captured: list | None = None):
    w, b, v = (jnp.asarray(a, jnp.float32) for a in _weights())

    def critic_fn(x):
        if captured is not None:
            jax.debug.callback(lambda p: captured.append(np.asarray(p)), x)
        h = jnp.tanh(x.reshape(x.shape[0], -1) @ w + b)
        return h @ v + 0.5 * jnp.sum(h * h, axis=-1)

    return critic_fn


def _reference_norms(points: np.ndarray) -> np.ndarray:
    """||d critic / dx|| per example: d/dx [v.h + |h|^2 / 2] = W ((v + h) * (1 - h^2))."""
    w, b, v = _weights()
    x = np.asarray(points, np.float64).reshape(len(points), -1)
    h = np.tanh(x @ w + b)
    grads = ((v + h) * (1.0 - h * h)) @ w.T
    return np.linalg.norm(grads, axis=1)


def _real(rng: np.random.Generator) -> np.ndarray:
    # Features on very different scales: a per-feature std would differ from the batch's by 10x.
    scales = np.array([0.1, 0.3, 1.0, 3.0, 0.2, 2.0])
    return (rng.normal(size=(B, D)) * scales + 0.5).astype(np.float32)


def test_reference_critic_is_far_from_linear():
    norms = _reference_norms(_real(np.random.default_rng(1)))
    assert norms.std() > 0.2 * norms.mean()  # the gradient norm depends on the point
    assert np.abs(norms - 1.0).mean() > 0.3  # and the penalty is far from 0


def test_dragan_points_and_gradient_penalty_match_numpy():
    rng = np.random.default_rng(2)
    real = _real(rng)
    noise = rng.uniform(size=real.shape).astype(np.float32)
    alpha = rng.uniform(size=B).astype(np.float32)
    std = np.float32(real.astype(np.float64).std())
    points = np.asarray(penalties.dragan_points(real, noise, alpha, std, 0.5))
    expected = real.astype(np.float64) + alpha[:, None] * (0.5 * std * noise)
    np.testing.assert_allclose(points, expected, rtol=1e-6, atol=1e-6)
    for target in (1.0, 0.5):
        norms = penalties.input_gradient_norms(_critic(), jnp.asarray(points))
        got = float(penalties.penalty_from_norms(norms, target=target))
        want = np.mean((_reference_norms(expected) - target) ** 2)
        np.testing.assert_allclose(got, want, rtol=1e-4)


def test_dragan_penalty_perturbs_real_data_by_the_batch_spread():
    real = _real(np.random.default_rng(3))
    captured: list[np.ndarray] = []
    draws = penalties.draw(jax.random.key(0), jnp.asarray(real), noise=True)
    got = float(penalties.dragan(_critic(captured), jnp.asarray(real), None, draws)[0])
    jax.effects_barrier()
    assert captured, "the critic was never called"
    points = captured[-1].astype(np.float64)
    # DRAGAN: x + alpha * 0.5 * std(batch) * u with u ~ U[0, 1] per entry, alpha ~ U[0, 1] per
    # example, so the ratio r = (point - x) / (0.5 std) = alpha * u lies in [0, 1], has mean
    # 1/4, and each example's largest ratio is about its alpha (uniform over examples).
    ratio = (points - real) / (0.5 * real.astype(np.float64).std())
    assert ratio.min() >= -1e-5 and ratio.max() <= 1 + 1e-5
    assert abs(ratio.mean() - 0.25) < 0.08
    assert np.ptp(ratio.max(axis=1)) > 0.5  # one alpha per example, not one for the batch
    # The penalty is the gradient penalty at exactly those points.
    want = np.mean((_reference_norms(points) - 1.0) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-4)
