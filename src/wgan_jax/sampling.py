"""Sampling: the one jitted generator, truncated latents, spherical interpolation, writers.

* `jitted_generator(gan, use_ema)`: THE jitted inference-mode generator of a GAN, kept across
  calls (per GAN and `use_ema`, for the most recent GAN), so that evaluation, `sample` and the
  trainer's progress pictures share one program per batch shape and precision;
  `generate_from_latents` runs it in batches of `GENERATOR_BATCH` and `draw_samples` on seeded
  N(0, I) latents (the callers choose the precision, `precision.scope`).

Library functions, deterministic for a seed (a `sample --truncation PSI` / `--interpolate STEPS
--out FILE.png|FILE.gif` face calls them; see the README):

* `truncated_normal_latents(key, n, z_dim, psi)`: N(0, I) latents whose coordinates beyond
  +-psi are redrawn, i.e. each coordinate from the standard normal truncated to [-psi, psi]
  (`jax.random.truncated_normal`), the "truncation trick" (Brock et al. 2019);
* `slerp(z0, z1, t)`: spherical interpolation (Shoemake 1985; White 2016 for GAN latents),
  which keeps Gaussian latents at a typical norm where linear interpolation shrinks them;
* `interpolation_latents(seed, steps, z_dim, rows=..., psi=...)`: `rows` seeded pairs of
  endpoints, each joined by `steps` slerped latents, `[rows, steps, z_dim]`;
* `save_interpolation_png` (one row per pair, one column per step) and `save_interpolation_gif`
  (one frame per step, the pairs side by side, with a progress bar under them).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from wgan_jax import fs, plots
from wgan_jax import jacobian_truncation as jacobian_truncation_lib
from wgan_jax.errors import UserError
from wgan_jax.state import GAN, TrainState, apply_generator, gan_program

__all__ = ["jitted_generator", "generate_from_latents", "draw_samples", "truncated_normal_latents",
           "slerp", "interpolation_latents", "save_interpolation_png", "save_interpolation_gif",
           "GENERATOR_BATCH"]

_PARALLEL = 1e-6  # sin(angle) below this: the endpoints are (anti)parallel, interpolate linearly
GENERATOR_BATCH = 1000  #: latents per call of the jitted generator in `generate_from_latents`

Generator = Callable[[TrainState, jax.Array, "jax.Array | None"], jax.Array]


def jitted_generator(gan: GAN, use_ema: bool) -> Generator:
    """`fn(state, z, labels)`: `gan`'s generator in inference mode, jitted (the EMA weights
    with `use_ema`; a conditional generator's of classes `labels`, None: sample i of class
    i % classes, see `state.apply_generator`).

    Kept across calls (`state.gan_program`), so the evaluations and pictures of a training run
    compile once; a new GAN object (e.g. after a rollback) compiles anew and releases the last
    one's programs.
    """
    return gan_program(gan, ("generator", bool(use_ema)), lambda: jax.jit(
        lambda s, z, y: apply_generator(gan, s, z, use_ema=use_ema, labels=y)))


def generate_from_latents(
    gan: GAN, state: TrainState, z: Any, use_ema: bool, labels: Any = None
) -> np.ndarray:
    """The generator's float32 outputs for latents `z` [N, z_dim], in batches of
    `GENERATOR_BATCH`; a conditional generator's of classes `labels` [N] (None: sample i of
    class i % classes)."""
    fn = jitted_generator(gan, use_ema)
    if labels is None and gan.num_classes:
        labels = np.arange(len(z), dtype=np.int32) % gan.num_classes
    parts = [np.asarray(fn(state, z[i : i + GENERATOR_BATCH],
                           None if labels is None else labels[i : i + GENERATOR_BATCH]))
             for i in range(0, len(z), GENERATOR_BATCH)]
    return np.concatenate(parts).astype(np.float32)


def draw_samples(
    gan: GAN, state: TrainState, num: int, seed: int, use_ema: bool, labels: Any = None,
    jacobian_truncation: float = 0.0,
) -> np.ndarray:
    """`num` float32 samples from N(0, I) latents drawn with `seed` (`generate_from_latents`;
    a conditional generator's of classes `labels`). `jacobian_truncation` > 0 keeps the
    smoothest latents of a larger draw (`jacobian_truncation.truncated_latents`)."""
    key = jax.random.PRNGKey(seed)
    if jacobian_truncation:
        z = jacobian_truncation_lib.truncated_latents(gan, state, key, num, jacobian_truncation,
                                                      use_ema)
    else:
        z = jax.random.normal(key, (num, gan.z_dim))
    return generate_from_latents(gan, state, z, use_ema, labels)


def _check_psi(psi: float) -> None:
    if not (math.isfinite(psi) and psi > 0):
        raise UserError(f"truncation psi must be a number > 0, got {psi!r}")


def truncated_normal_latents(key: jax.Array, n: int, z_dim: int, psi: float) -> jax.Array:
    """[n, z_dim] float32 latents, every coordinate in [-psi, psi]; `psi <= 0` is a UserError."""
    _check_psi(psi)
    return jax.random.truncated_normal(key, -psi, psi, (n, z_dim), jnp.float32)


def slerp(z0: jax.Array, z1: jax.Array, t: jax.Array | float) -> jax.Array:
    """Spherical interpolation between `z0` and `z1` (`[..., D]`) at `t` (broadcast to `[...]`).

    `sin((1-t) w) / sin(w) * z0 + sin(t w) / sin(w) * z1`, w the angle between them: exactly
    `z0` at t=0 and `z1` at t=1; endpoints of equal norm keep that norm all the way.
    """
    t = jnp.asarray(t, jnp.result_type(z0, jnp.float32))[..., None]

    def unit(z: jax.Array) -> jax.Array:
        return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-30)

    cos = jnp.clip(jnp.sum(unit(z0) * unit(z1), axis=-1, keepdims=True), -1.0, 1.0)
    omega = jnp.arccos(cos)
    sin = jnp.sin(omega)
    parallel = sin < _PARALLEL
    safe = jnp.where(parallel, 1.0, sin)
    a = jnp.where(parallel, 1.0 - t, jnp.sin((1.0 - t) * omega) / safe)
    b = jnp.where(parallel, t, jnp.sin(t * omega) / safe)
    return a * z0 + b * z1


def interpolation_latents(
    seed: int, steps: int, z_dim: int, *, rows: int = 1, psi: float | None = None
) -> jax.Array:
    """`[rows, steps, z_dim]`: row r slerps from one seeded latent to another in `steps` steps.

    The endpoints are N(0, I), or truncated at `psi` when given; the same seed gives the same
    latents.
    """
    if steps < 2:
        raise UserError(f"an interpolation needs at least 2 steps, got {steps}")
    if rows < 1:
        raise UserError(f"an interpolation needs at least 1 row, got {rows}")
    key = jax.random.PRNGKey(seed)
    if psi is None:
        ends = jax.random.normal(key, (2 * rows, z_dim), jnp.float32)
    else:
        ends = truncated_normal_latents(key, 2 * rows, z_dim, psi)
    t = jnp.linspace(0.0, 1.0, steps)
    return slerp(ends[:rows, None], ends[rows:, None], t[None, :])


def save_interpolation_png(path: str, images: np.ndarray) -> None:
    """`[rows, steps, H, W, C]` images in [-1, 1] as one PNG grid, a row per interpolation."""
    images = np.asarray(images)
    rows, steps = images.shape[:2]
    plots.save_image_grid(path, images.reshape(rows * steps, *images.shape[2:]), ncols=steps)


def save_interpolation_gif(
    path: str, images: np.ndarray, *, duration_ms: int = 100, min_tile: int = 32
) -> None:
    """`[rows, steps, H, W, C]` images in [-1, 1] as an animated GIF of `steps` frames.

    Frame s shows step s of every row side by side (RGBA over a checkerboard), enlarged to at
    least `min_tile` px per image, with a bar under them that grows with s (so no two frames
    are equal and none is merged away). Loops forever; written atomically.
    """
    images = np.asarray(images)
    rows, steps = images.shape[:2]
    factor = max(1, math.ceil(min_tile / images.shape[2]))
    frames = []
    for s in range(steps):
        grid = plots.grid_rgb(images[:, s], ncols=rows)
        grid = grid.repeat(factor, axis=0).repeat(factor, axis=1)
        width = max(grid.shape[1], steps)  # the bar grows by >= 1 px per frame
        grid = np.pad(grid, ((0, 0), (0, width - grid.shape[1]), (0, 0)))
        bar = np.zeros((3 * factor, width, 3), np.uint8)
        bar[:, : round(width * (s + 1) / steps)] = 255
        frames.append(Image.fromarray(np.concatenate([grid, bar]), mode="RGB"))
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:],
                   duration=duration_ms, loop=0)
    fs.write_atomic(path, buffer.getvalue())
