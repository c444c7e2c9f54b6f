"""Lipschitz penalties for the critic, pure and usable from any JAX code.

`critic_fn` everywhere maps a batch `[B, ...]` to per-example scores `[B]`. Because a critic
without BatchNorm has no coupling between examples, the input gradient of `sum(critic_fn(x))`
is exactly the per-example input gradient, so one `jax.grad` gives all of them.

The train step calls penalties through one signature, `PenaltyFn`::

    penalty(critic_fn, real, fake, draws, *, target, axis_name) -> (value, norms)

* `real`, `fake`: this device's examples `[b, ...]`; `draws`: a `Draws` of uniform random
  numbers for those examples, drawn by the step for the *global* batch (so they do not depend
  on how the batch is split); `draws.noise` is None unless the penalty is "dragan" or your own.
* `target`: the gradient-norm target; `axis_name`: the data axis under `shard_map` (None
  outside), for penalties that need global statistics (DRAGAN's spread of the data).
* `value`: the mean over the given examples (the step averages it over devices and adds
  `penalty_weight * value` to the critic's loss); `norms`: the per-example input-gradient
  norms `[b]` behind it (for diagnostics), or None.

`PENALTIES` maps the names "gp", "lp", "r1", "dragan", "r2" and "r1r2" to the functions
below; "clip" (the original WGAN's weight clipping, an optimizer transform: `clip_weights`) and
"none" are no penalty (`NOT_PENALTIES`). Pass your own function with the same signature
instead of a name.

On their own, outside the step (one name per penalty; random numbers from a key you pass
first, as in `jax.random`): `gp(critic_fn, real, fake, draw(key, real))`,
`lp(...)`, `r1(critic_fn, real)`, `dragan(critic_fn, real, None, draw(key, real, noise=True))`
each return `(value, norms)`. `gradient_penalty`, `r1_penalty` and `dragan_penalty`, and the
order `interpolate(real, fake, key)`, are deprecated (a `DeprecationWarning`; gone in the next
release).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

__all__ = ["gp", "lp", "r1", "r2", "r1r2", "dragan", "draw", "Draws", "interpolate",
           "interpolate_with", "input_gradients", "input_gradient_norms", "penalty_from_norms",
           "safe_norm", "global_std", "dragan_points", "clip_weights", "ClipWeightsState",
           "PENALTIES", "NOT_PENALTIES", "CriticFn", "PenaltyFn", "gradient_penalty", "r1_penalty",
           "dragan_penalty"]

#: A critic as a function: samples `[B, ...]` -> scores `[B]`.
CriticFn = Callable[[jax.Array], jax.Array]


class Draws(NamedTuple):
    """A penalty's random numbers: `alpha` [B] ~ U[0, 1]; `noise` like `real` ~ U[0, 1] or None."""

    alpha: jax.Array
    noise: jax.Array | None = None


#: `penalty(critic_fn, real, fake, draws, *, target, axis_name) -> (value, norms)`: the one
#: signature the step calls every penalty with (the module's docstring says what each means).
PenaltyFn = Callable[..., tuple[jax.Array, jax.Array | None]]


def _expand_like(per_example: jax.Array, x: jax.Array) -> jax.Array:
    return per_example.reshape(per_example.shape + (1,) * (x.ndim - per_example.ndim))


def interpolate_with(real: jax.Array, fake: jax.Array, alpha: jax.Array) -> jax.Array:
    """real + alpha * (fake - real) with one alpha per example (shape [B])."""
    return real + _expand_like(alpha.astype(real.dtype), real) * (fake - real)


def draw(key: jax.Array, real: jax.Array, *, noise: bool = False) -> Draws:
    """A penalty's random numbers for the examples `real` [B, ...], from `key`: one alpha
    ~ U[0, 1] per example, and with `noise` (DRAGAN) uniform noise shaped like `real`."""
    k_alpha, k_noise = jax.random.split(key)
    alpha = jax.random.uniform(k_alpha, (real.shape[0],), dtype=jnp.float32)
    return Draws(alpha, jax.random.uniform(k_noise, real.shape, jnp.float32) if noise else None)


def _is_key(x: jax.Array) -> bool:
    x = jnp.asarray(x) if not hasattr(x, "dtype") else x
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key) or (
        x.dtype == jnp.uint32 and x.shape == (2,))


def _deprecated(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"wgan_jax.penalties.{old} is deprecated and goes in the next release: "
                  f"use {new}", DeprecationWarning, stacklevel=3)


def interpolate(key: jax.Array, real: jax.Array, fake: jax.Array) -> jax.Array:
    """Random points on the lines between real and fake examples (WGAN-GP's x-hat).

    One alpha ~ U[0, 1] per example, broadcast over the example's other axes (not one per
    pixel, not from a normal): `draw(key, real).alpha`, the points `gp` scores with those
    draws. Key first, as in `jax.random`; the old order
    `interpolate(real, fake, key)` still works for one release, with a `DeprecationWarning`.
    """
    if _is_key(fake) and not _is_key(key):
        _deprecated("interpolate(real, fake, key)", "interpolate(key, real, fake)")
        key, real, fake = fake, key, real
    return interpolate_with(real, fake, draw(key, real).alpha)


def _at_least_f32(x: jax.Array) -> jax.Array:
    """bf16/f16 -> f32 (norms and penalties are always computed in f32 or better)."""
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def safe_norm(x: jax.Array, axis: tuple[int, ...] | int | None = None) -> jax.Array:
    """L2 norm with a finite gradient everywhere: exact value, 0 with gradient 0 at x = 0.

    `jnp.linalg.norm` differentiates to 0/0 = NaN at zero, which poisons the whole update
    when a critic is locally flat.
    """
    sq = jnp.sum(jnp.square(_at_least_f32(x)), axis=axis)
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


def input_gradients(critic_fn: CriticFn, x: jax.Array) -> jax.Array:
    """Per-example gradients of the critic's score with respect to its input."""
    return jax.grad(lambda inputs: jnp.sum(_at_least_f32(critic_fn(inputs))))(x)


def input_gradient_norms(critic_fn: CriticFn, x: jax.Array) -> jax.Array:
    """Per-example L2 norms (over all non-batch axes) of the critic's input gradient: [B]."""
    grads = input_gradients(critic_fn, x)
    return safe_norm(grads, axis=tuple(range(1, grads.ndim)))


def penalty_from_norms(
    norms: jax.Array, *, target: float = 1.0, one_sided: bool = False
) -> jax.Array:
    """mean((norm - target)^2), or mean(max(0, norm - target)^2) when one-sided."""
    gap = norms - target
    if one_sided:
        gap = jax.nn.relu(gap)
    return jnp.mean(jnp.square(gap))


def gradient_penalty(
    critic_fn: CriticFn, x_hat: jax.Array, *, target: float = 1.0, one_sided: bool = False
) -> jax.Array:
    """The WGAN-GP penalty E[(||grad_x D(x_hat)||_2 - target)^2] (one-sided: WGAN-LP).

    Finite, with a finite gradient, even where the critic's input gradient is exactly zero.
    Deprecated (one name per penalty): `gp(critic_fn, real, fake, draw(key, real))`, or
    `penalty_from_norms(input_gradient_norms(critic_fn, x_hat))` at points of your own.
    """
    _deprecated("gradient_penalty(critic_fn, x_hat)",
                "gp(critic_fn, real, fake, draw(key, real)) or "
                "penalty_from_norms(input_gradient_norms(critic_fn, x_hat))")
    norms = input_gradient_norms(critic_fn, x_hat)
    return penalty_from_norms(norms, target=target, one_sided=one_sided)


def r1_penalty(critic_fn: CriticFn, real: jax.Array) -> jax.Array:
    """R1 (Mescheder et al. 2018): E[||grad_x D(x)||^2] on real data, zero-centred.

    The usual `gamma / 2` factor is left to the caller's weight. Deprecated (one name per
    penalty): `r1(critic_fn, real)[0]`.
    """
    _deprecated("r1_penalty(critic_fn, real)", "r1(critic_fn, real)[0]")
    return r1(critic_fn, real)[0]


def global_std(x: jax.Array, axis_name: str | None = None) -> jax.Array:
    """The standard deviation of all values of `x`, over all devices of `axis_name` if given.

    Two passes (mean, then mean squared deviation), each averaged over devices: equal to the
    one-device `jnp.std` of the whole batch whatever the split (equal shards).
    """
    def mean(v: jax.Array) -> jax.Array:
        v = jnp.mean(_at_least_f32(v))
        return lax.pmean(v, axis_name) if axis_name is not None else v

    centre = mean(x)
    return jnp.sqrt(mean(jnp.square(_at_least_f32(x) - centre)))


def dragan_points(
    real: jax.Array, noise: jax.Array, alpha: jax.Array, std: jax.Array, scale: float = 0.5
) -> jax.Array:
    """DRAGAN's points: real + alpha * (scale * std * noise), noise ~ U[0, 1] like `real`.

    `std` is the data's standard deviation (a scalar or per-feature array); pass the global
    batch's value to keep the result independent of how the batch is split across devices.
    """
    return interpolate_with(real, real + scale * std * noise, alpha)


def dragan_penalty(
    critic_fn: CriticFn,
    real: jax.Array,
    key: jax.Array,
    *,
    scale: float = 0.5,
    target: float = 1.0,
    axis_name: str | None = None,
) -> jax.Array:
    """DRAGAN (Kodali et al. 2017): the gradient penalty around perturbed real data.

    The perturbation's size is `scale` times the spread of `real`; under `shard_map` pass
    `axis_name` so that it is the global batch's spread (`global_std`), not this device's.
    Deprecated (one name per penalty): `dragan(critic_fn, real, None, draw(key, real,
    noise=True), axis_name=...)[0]`.
    """
    _deprecated("dragan_penalty(critic_fn, real, key)",
                "dragan(critic_fn, real, None, draw(key, real, noise=True))[0]")
    k_noise, k_alpha = jax.random.split(key)
    draws = Draws(
        alpha=jax.random.uniform(k_alpha, (real.shape[0],)),
        noise=jax.random.uniform(k_noise, real.shape, dtype=real.dtype),
    )
    return dragan(critic_fn, real, real, draws, target=target, axis_name=axis_name, scale=scale)[0]


def gp(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array, draws: Draws, *,
    target: float = 1.0, axis_name: str | None = None, one_sided: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """WGAN-GP: (||grad D(x_hat)|| - target)^2 at x_hat between real and fake (`PenaltyFn`)."""
    del axis_name
    norms = input_gradient_norms(critic_fn, interpolate_with(real, fake, draws.alpha))
    return penalty_from_norms(norms, target=target, one_sided=one_sided), norms


def lp(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array, draws: Draws, *,
    target: float = 1.0, axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """WGAN-LP: the one-sided max(0, ||grad D(x_hat)|| - target)^2 (`PenaltyFn`)."""
    return gp(critic_fn, real, fake, draws, target=target, axis_name=axis_name, one_sided=True)


def r1(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array | None = None,
    draws: Draws | None = None, *, target: float = 1.0, axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """R1: ||grad D(real)||^2, zero-centred (`target` does not apply; `fake` and `draws` are
    not used, so `r1(critic_fn, real)` works on its own) (`PenaltyFn`)."""
    del fake, draws, target, axis_name
    norms = input_gradient_norms(critic_fn, real)
    return jnp.mean(jnp.square(norms)), norms


def dragan(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array | None, draws: Draws, *,
    target: float = 1.0, axis_name: str | None = None, scale: float = 0.5,
) -> tuple[jax.Array, jax.Array]:
    """DRAGAN around real data, perturbed by `scale` x the global spread (`PenaltyFn`)."""
    del fake
    if draws.noise is None:
        raise ValueError("the dragan penalty needs draws.noise (uniform noise shaped like real)")
    points = dragan_points(real, draws.noise, draws.alpha, global_std(real, axis_name), scale)
    norms = input_gradient_norms(critic_fn, points)
    return penalty_from_norms(norms, target=target), norms


#: Penalty name -> its `PenaltyFn` (`StepConfig.penalty`, `config.penalty`).
PENALTIES: dict[str, PenaltyFn] = {"gp": gp, "lp": lp, "r1": r1, "dragan": dragan}
#: Names of `config.penalty` that add no penalty term (weight clipping is an optimizer
#: transform, `clip_weights`).
NOT_PENALTIES = ("clip", "none")


class ClipWeightsState(NamedTuple):
    """Stateless."""


def clip_weights(clip_value: float) -> optax.GradientTransformation:
    """The original WGAN's weight clipping as an optax transform.

    Chain it after the optimizer: it rewrites the final updates so that `params + updates`
    lies in `[-clip_value, clip_value]`, which is what clipping after each step does.
    """

    def init_fn(params):
        del params
        return ClipWeightsState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("clip_weights needs params: call update(updates, state, params)")
        new_updates = jax.tree.map(
            lambda u, p: jnp.clip(p + u, -clip_value, clip_value) - p, updates, params
        )
        return new_updates, state

    return optax.GradientTransformation(init_fn, update_fn)


def r2(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array, draws: Draws, *,
    target: float = 1.0, axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """R2 (Mescheder et al. 2018): ||grad D(fake)||^2 on the generator's samples, zero-centred
    (`target` does not apply) (`PenaltyFn`). A conditional critic scores them with the real
    examples' labels, as the step gives every penalty (the same as for "gp")."""
    del real, draws, target, axis_name
    norms = input_gradient_norms(critic_fn, fake)
    return jnp.mean(jnp.square(norms)), norms


def r1r2(
    critic_fn: CriticFn, real: jax.Array, fake: jax.Array, draws: Draws, *,
    target: float = 1.0, axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """R1 + R2 (R3GAN, Huang et al. 2024): E||grad D(real)||^2 + E||grad D(fake)||^2, both
    zero-centred (`PenaltyFn`); `norms` are the real examples' then the fake ones' `[2b]`."""
    r1_value, r1_norms = r1(critic_fn, real, fake, draws, target=target, axis_name=axis_name)
    r2_value, r2_norms = r2(critic_fn, real, fake, draws, target=target, axis_name=axis_name)
    return r1_value + r2_value, jnp.concatenate([r1_norms, r2_norms])


PENALTIES["r2"] = r2
PENALTIES["r1r2"] = r1r2
