"""Sampling controls (`wgan_jax.sampling`): truncation, slerp, interpolation PNG and GIF."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from wgan_jax import sampling
from wgan_jax.errors import UserError


def test_truncated_latents_deterministic_and_within_psi():
    key = jax.random.PRNGKey(0)
    a = sampling.truncated_normal_latents(key, 2000, 16, 0.5)
    b = sampling.truncated_normal_latents(key, 2000, 16, 0.5)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2000, 16) and float(jnp.max(jnp.abs(a))) <= 0.5
    # redrawn, not clipped: no mass piles up at the bounds, and the spread is the truncated one
    assert float(jnp.mean(jnp.abs(a) > 0.499)) < 0.01
    assert float(jnp.std(a)) == pytest.approx(0.2839, rel=0.02)  # std of N(0,1) | |z| < 0.5
    wide = sampling.truncated_normal_latents(key, 2000, 16, 3.0)
    assert float(jnp.std(wide)) == pytest.approx(0.9866, rel=0.02)


@pytest.mark.parametrize("psi", [0.0, -1.0, float("nan")])
def test_truncation_of_zero_or_less_is_refused(psi):
    with pytest.raises(UserError, match="psi must be a number > 0"):
        sampling.truncated_normal_latents(jax.random.PRNGKey(0), 4, 2, psi)


def test_slerp_endpoints_exact_and_norms_kept():
    z = jax.random.normal(jax.random.PRNGKey(1), (2, 64, 128))
    z0, z1 = z[0], z[1]
    np.testing.assert_array_equal(sampling.slerp(z0, z1, 0.0), z0)
    np.testing.assert_array_equal(sampling.slerp(z0, z1, 1.0), z1)
    mid = sampling.slerp(z0, z1, 0.5)
    n0, n1, nm = (np.linalg.norm(v, axis=-1) for v in (z0, z1, mid))
    lerp = np.linalg.norm((z0 + z1) / 2, axis=-1)
    # slerp stays between the endpoint norms; linear interpolation shrinks by ~1/sqrt(2)
    assert np.all(nm >= 0.999 * np.minimum(n0, n1)) and np.all(nm <= 1.001 * np.maximum(n0, n1))
    assert np.mean(lerp / ((n0 + n1) / 2)) < 0.75
    # equal norms: the norm is constant along the path, and the angle moves uniformly
    u0, u1 = z0 / n0[:, None], z1 / n1[:, None]
    ts = jnp.linspace(0, 1, 5)
    path = sampling.slerp(u0[:, None], u1[:, None], ts[None, :])
    np.testing.assert_allclose(np.linalg.norm(path, axis=-1), 1.0, rtol=1e-5)
    angles = np.arccos(np.clip(np.sum(path * u0[:, None], -1), -1, 1))
    np.testing.assert_allclose(angles, angles[:, -1:] * np.asarray(ts)[None], atol=2e-3)


def test_slerp_of_parallel_vectors_is_linear():
    z = jnp.ones((3,))
    np.testing.assert_allclose(sampling.slerp(z, 2 * z, 0.25), 1.25 * z, rtol=1e-6)


def test_interpolation_latents_deterministic_with_seeded_endpoints():
    a = sampling.interpolation_latents(3, 6, 8, rows=2)
    np.testing.assert_array_equal(a, sampling.interpolation_latents(3, 6, 8, rows=2))
    assert a.shape == (2, 6, 8)
    assert not np.allclose(a, sampling.interpolation_latents(4, 6, 8, rows=2))
    truncated = sampling.interpolation_latents(3, 6, 8, rows=2, psi=0.7)
    ends = np.asarray(truncated)[:, [0, -1]]
    assert np.max(np.abs(ends)) <= 0.7
    with pytest.raises(UserError, match="at least 2 steps"):
        sampling.interpolation_latents(3, 1, 8)


def _images(rows: int, steps: int, channels: int) -> np.ndarray:
    t = np.linspace(-1, 1, steps)[None, :, None, None, None]
    return np.broadcast_to(t, (rows, steps, 8, 8, channels)).astype(np.float32)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_gif_has_one_frame_per_step(tmp_path, channels):
    path = str(tmp_path / "walk.gif")
    images = _images(2, 7, channels)
    images[:, 3:5] = images[:, 3:4]  # two equal steps must still be two frames
    sampling.save_interpolation_gif(path, images, duration_ms=50)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames == 7
        assert gif.info["duration"] == 50 and gif.info.get("loop") == 0


def test_png_grid_has_a_row_per_pair_and_a_column_per_step(tmp_path):
    path = str(tmp_path / "walk.png")
    sampling.save_interpolation_png(path, _images(3, 5, 3))
    with Image.open(path) as png:
        # tiles of 8 px are enlarged x4 to 32 px, 2 px padding between and around
        assert png.size == (5 * 34 + 2, 3 * 34 + 2)
