"""DiffAugment (Zhao et al. 2020) and instance noise: what the critic sees, as pure functions.

DiffAugment applies one random, differentiable augmentation to every image the critic scores,
real and fake alike, in the critic's loss and in the generator's, so a critic trained on little
data cannot memorise it and the generator still gets gradients through the augmentation.
Policies (`config.augment`, comma-separated, applied in the order given; Zhao et al.'s
reference code, images NHWC in [-1, 1]):

* ``color``: per example, brightness + U[-0.5, 0.5), then saturation (deviation from the
  channel mean) x U[0, 2), then contrast (deviation from the image mean) x U[0.5, 1.5);
  every channel is treated alike (an RGBA image's alpha too, as in the reference code);
* ``translation``: shift by whole pixels, up to 1/8 of the size each way, filling with 0;
* ``cutout``: zero a square of half the size at a random centre (clipped at the border).

Random numbers and splitting. `draw(key, batch, image_shape, policy)` draws the numbers of the
GLOBAL batch as a dict of per-example arrays (leading axis = batch); `apply(x, params, policy)` is
a pure function of the images and those numbers, example by example. A data-parallel step draws
outside `shard_map` and passes the params split along the batch axis like the images, so each
example gets the same augmentation on 1 or N devices. `apply` is differentiable in `x`
(gathers, masks and affine maps; the integers in `params` carry no gradient).

The gradient penalty and augmentation. The penalty must constrain the critic where the loss
evaluates it, and the loss evaluates it on augmented images only. So the interpolates are taken
between the AUGMENTED real and the AUGMENTED fake batch (each with its own draw, as in the
loss): ``x_hat = T_r(real) + alpha * (T_f(fake) - T_r(real))``; R1 takes the input gradient at
``T_r(real)``, DRAGAN perturbs ``T_r(real)``. The critic is thus 1-Lipschitz on the augmented
distribution, which is the one its scores are trained on (and the one the generator's gradient
comes through, since the generator's loss scores ``T(G(z))``).

Instance noise (Sonderby et al. 2016; Arjovsky & Bottou 2017): Gaussian noise of standard
deviation `instance_noise_sigma(sigma, step, total)` added to every critic input, annealed
linearly from `sigma` at the first iteration to exactly 0 at the last. The noise itself should be
drawn for the global batch before the split, like the augmentation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wgan_jax.augment_policy import POLICIES, parse_policy

__all__ = ["draw", "apply", "instance_noise_sigma", "Params"]

TRANSLATION_RATIO = 0.125
CUTOUT_RATIO = 0.5

#: One batch's augmentation draws: policy name -> its random numbers (`draw`, `apply`).
Params = dict[str, jax.Array]


def _shift_limit(size: int) -> int:
    return int(size * TRANSLATION_RATIO + 0.5)


def _cutout_size(size: int) -> int:
    return int(size * CUTOUT_RATIO + 0.5)


def draw(key: jax.Array, batch: int, image_shape: tuple[int, ...], policy: str) -> Params:
    """The random numbers of one augmentation of a `batch` of `image_shape` (H, W, C) images.

    Each kind draws from its own key (`fold_in(key, its index in POLICIES)`), so adding a kind
    to the policy does not change the numbers of the others.
    """
    names = parse_policy(policy)
    if names and len(image_shape) != 3:
        raise ValueError(f"DiffAugment needs images (H, W, C), got example shape {image_shape}")
    params: Params = {}
    for name in names:
        k = jax.random.fold_in(key, POLICIES.index(name))
        if name == "color":
            u = jax.random.uniform(k, (3, batch), jnp.float32)
            params["brightness"] = u[0] - 0.5
            params["saturation"] = 2.0 * u[1]
            params["contrast"] = u[2] + 0.5
        elif name == "translation":
            h, w = image_shape[:2]
            kh, kw = jax.random.split(k)
            params["translation"] = jnp.stack([
                jax.random.randint(kh, (batch,), -_shift_limit(h), _shift_limit(h) + 1),
                jax.random.randint(kw, (batch,), -_shift_limit(w), _shift_limit(w) + 1),
            ], axis=1)
        else:
            h, w = image_shape[:2]
            kh, kw = jax.random.split(k)
            # The reference's centre range: [0, size + 1 - cutout % 2).
            params["cutout"] = jnp.stack([
                jax.random.randint(kh, (batch,), 0, h + 1 - _cutout_size(h) % 2),
                jax.random.randint(kw, (batch,), 0, w + 1 - _cutout_size(w) % 2),
            ], axis=1)
    return params


def _per_example(v: jax.Array, x: jax.Array) -> jax.Array:
    return v.astype(x.dtype).reshape(-1, 1, 1, 1)


def _color(x: jax.Array, p: Params) -> jax.Array:
    x = x + _per_example(p["brightness"], x)
    mean = jnp.mean(x, axis=3, keepdims=True)
    x = (x - mean) * _per_example(p["saturation"], x) + mean
    mean = jnp.mean(x, axis=(1, 2, 3), keepdims=True)
    return (x - mean) * _per_example(p["contrast"], x) + mean


def _translate(x: jax.Array, shifts: jax.Array) -> jax.Array:
    """out[b, i, j] = x[b, i + dy_b, j + dx_b], 0 outside the image (the reference's gather)."""
    _, h, w, _ = x.shape
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))

    def one(image: jax.Array, shift: jax.Array) -> jax.Array:
        rows = jnp.clip(jnp.arange(h) + shift[0] + 1, 0, h + 1)
        cols = jnp.clip(jnp.arange(w) + shift[1] + 1, 0, w + 1)
        return image[rows][:, cols]

    return jax.vmap(one)(padded, shifts)


def _cutout(x: jax.Array, centres: jax.Array) -> jax.Array:
    """Zeroes rows [c - s//2, c - s//2 + s) x the same for columns, per example."""
    _, h, w, _ = x.shape

    def inside(size: int, centre: jax.Array) -> jax.Array:
        cut = _cutout_size(size)
        start = centre[:, None] - cut // 2
        i = jnp.arange(size)[None, :]
        return (i >= start) & (i < start + cut)

    hole = inside(h, centres[:, 0])[:, :, None] & inside(w, centres[:, 1])[:, None, :]
    return x * (~hole).astype(x.dtype)[..., None]


def apply(x: jax.Array, params: Params, policy: str) -> jax.Array:
    """`x` [B, H, W, C] augmented with `params` from `draw` (same policy), kind by kind."""
    for name in parse_policy(policy):
        if name == "color":
            x = _color(x, params)
        elif name == "translation":
            x = _translate(x, params["translation"])
        else:
            x = _cutout(x, params["cutout"])
    return x


def instance_noise_sigma(sigma: float, step: jax.Array | int, total: int) -> jax.Array:
    """`sigma * (1 - step / (total - 1))` at (0-based) generator iteration `step` of `total`.

    Exactly `sigma` at step 0 and exactly 0 at the last iteration (`total - 1`), never negative
    past the end; 0 throughout a one-iteration run. Works on a traced `step`.
    """
    if total <= 1:
        return jnp.zeros((), jnp.float32)
    step = jnp.asarray(step, jnp.float32)
    return sigma * jnp.clip(1.0 - step / (total - 1), 0.0, 1.0)
