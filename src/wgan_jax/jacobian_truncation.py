"""Jacobian-based truncation (Tanielian et al. 2020, "Learning disconnected manifolds: a no
GAN's land"): drop the latents where the generator is steepest.

A continuous generator fed a connected latent (N(0, I)) cannot put all its mass on disconnected
modes: it maps thin bands of latents onto the space between them, and precisely there its
Jacobian is largest (it must cross from one mode to the next over a short latent distance).
Of ceil(n / (1 - fraction)) seeded candidate latents, `smoothest_latents` keeps the n with the
smallest squared Frobenius norm ||dG(z)/dz||_F^2, in their drawn order, so the samples come
from the generator restricted to its smooth regions: on the 5x5 grid a `fraction` of 0.02
takes `configs/grid25.py`'s generators from 97.4% to 99.1% high-quality samples, the true
mixture's own 98.9% (benchmarks/README.md, "grid25 at the true-mixture limit"). The
generator's weights are untouched; only where it is sampled changes, and every caller says so
(`config.sampling.jacobian_truncation`, `sample --jacobian_truncation`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from wgan_jax.state import GAN, TrainState, apply_generator, gan_program

__all__ = ["truncated_latents", "smoothest_latents", "jacobian_sq_norms", "num_candidates",
           "check_fraction"]

_BATCH_ELEMENTS = 1 << 22  # Jacobian entries per jitted call: bounds memory for image generators


def check_fraction(fraction: float) -> None:
    """`ValueError` unless 0 <= `fraction` < 1 (the share of candidate latents dropped)."""
    if not (math.isfinite(fraction) and 0.0 <= fraction < 1.0):
        raise ValueError(f"must be in [0, 1) (the share of latents dropped), got {fraction!r}")


def num_candidates(n: int, fraction: float) -> int:
    """How many latents are drawn to keep `n` after dropping `fraction` of them."""
    check_fraction(fraction)
    return int(math.ceil(n / (1.0 - fraction) - 1e-9))


def _jacobian_fn(gan: GAN, use_ema: bool) -> Any:
    def one(state: TrainState, z: jax.Array) -> jax.Array:
        jac = jax.jacfwd(lambda v: apply_generator(gan, state, v[None], use_ema=use_ema)[0])(z)
        return jnp.sum(jnp.square(jac.astype(jnp.float32)))

    return gan_program(gan, ("jacobian_sq_norms", bool(use_ema)),
                       lambda: jax.jit(jax.vmap(one, in_axes=(None, 0))))


def jacobian_sq_norms(gan: GAN, state: TrainState, z: Any, use_ema: bool) -> np.ndarray:
    """||dG(z_i)/dz_i||_F^2 for each latent of `z` [N, z_dim], the generator in inference mode
    (the EMA weights with `use_ema`), as float32 numpy [N]. Unconditional generators only."""
    if gan.num_classes:
        raise ValueError("Jacobian truncation is for unconditional generators")
    z = jnp.asarray(z, jnp.float32)
    fn = _jacobian_fn(gan, use_ema)
    out_size = max(1, math.prod(jax.eval_shape(
        lambda v: apply_generator(gan, state, v, use_ema=use_ema), z[:1]).shape[1:]))
    batch = max(1, min(1000, _BATCH_ELEMENTS // (out_size * gan.z_dim)))
    batch = min(batch, len(z))
    pad = -len(z) % batch  # every call at the full batch: one compilation
    padded = jnp.concatenate([z, jnp.zeros((pad, gan.z_dim), z.dtype)]) if pad else z
    parts = [np.asarray(fn(state, padded[i : i + batch])) for i in range(0, len(padded), batch)]
    return np.concatenate(parts)[: len(z)].astype(np.float32)


def smoothest_latents(
    gan: GAN, state: TrainState, z: Any, n: int, use_ema: bool
) -> jax.Array:
    """The `n` latents of `z` with the smallest `jacobian_sq_norms`, in their order in `z`
    (ties: the earlier one)."""
    if not 0 < n <= len(z):
        raise ValueError(f"cannot keep {n} of {len(z)} latents")
    norms = jacobian_sq_norms(gan, state, z, use_ema)
    keep = np.sort(np.argsort(norms, kind="stable")[:n])
    return jnp.asarray(z)[keep]


def truncated_latents(
    gan: GAN, state: TrainState, key: jax.Array, n: int, fraction: float, use_ema: bool
) -> jax.Array:
    """`n` latents: the smoothest of `num_candidates(n, fraction)` N(0, I) draws with `key`
    (`fraction` 0: exactly `jax.random.normal(key, (n, z_dim))`)."""
    m = num_candidates(n, fraction)
    z = jax.random.normal(key, (m, gan.z_dim))
    return z if m == n else smoothest_latents(gan, state, z, n, use_ema)
