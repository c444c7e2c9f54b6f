"""The training state pytree, the GAN bundle (modules + optimizers), and their construction.

`TrainState` is the one source of truth: the step consumes and returns it, checkpoints save it
whole. Its random key is a base key; iteration `t` uses `fold_in(rng, t)`, so a resumed run
draws exactly the numbers an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from wgan_jax.penalties import clip_weights

PyTree = Any


@flax.struct.dataclass
class TrainState:
    """Everything a run needs to continue exactly (the data position is saved beside it)."""

    step: jax.Array  # generator iterations done (int32 scalar)
    g_params: PyTree
    g_state: PyTree  # the generator's other variable collections, e.g. {"batch_stats": ...}
    d_params: PyTree
    d_state: PyTree  # the critic's other collections ({} for a proper WGAN-GP critic)
    g_opt_state: PyTree
    d_opt_state: PyTree
    ema_params: PyTree  # EMA of g_params, or None
    rng: jax.Array  # base PRNG key data, uint32[2]


@dataclasses.dataclass(frozen=True)
class GAN:
    """The static parts of a run: the two Flax modules, their optimizers and the latent size.

    Any Flax generator `G(z, train=...) -> x` and critic `D(x, train=...) -> scores [B]` work;
    BatchNorm layers in the generator should use `axis_name="data"` so that their statistics
    are those of the global batch.
    """

    generator: nn.Module
    critic: nn.Module
    g_tx: optax.GradientTransformation
    d_tx: optax.GradientTransformation
    z_dim: int


def _schedule(lr: float, kind: str, total_steps: int) -> optax.Schedule:
    if kind == "linear":
        return optax.linear_schedule(lr, 0.0, max(total_steps, 1))
    return optax.constant_schedule(lr)


def make_optimizers(
    config: ml_collections.ConfigDict, lr_scale: float = 1.0
) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """Adam for G and D with their own learning rates, betas and schedules.

    A schedule counts its own network's updates, so the critic's spans `n_critic` times more
    steps. Non-finite gradients skip the update (`optax.apply_if_finite`) and are counted in
    the optimizer state. `lr_scale` lowers both rates after a rollback.
    """
    total = config.num_iterations
    g_tx = optax.adam(
        _schedule(config.generator_lr * lr_scale, config.lr_schedule, total),
        b1=config.generator_b1,
        b2=config.generator_b2,
    )
    d_tx = optax.adam(
        _schedule(config.critic_lr * lr_scale, config.lr_schedule, total * config.n_critic),
        b1=config.critic_b1,
        b2=config.critic_b2,
    )
    if config.penalty == "clip":
        d_tx = optax.chain(d_tx, clip_weights(config.clip_value))
    never = 2**30  # count skipped updates, never give up inside the step
    return (
        optax.apply_if_finite(g_tx, max_consecutive_errors=never),
        optax.apply_if_finite(d_tx, max_consecutive_errors=never),
    )


def split_variables(variables: PyTree) -> tuple[PyTree, PyTree]:
    """{"params": p, **rest} -> (p, rest)."""
    variables = dict(variables)
    params = variables.pop("params")
    return params, variables


def create_train_state(gan: GAN, data_shape: tuple[int, ...], seed: int, ema: bool) -> TrainState:
    """Initialises both networks and optimizers from `seed` (on the host, replicated)."""
    root = jax.random.PRNGKey(seed)
    k_g, k_d, k_run = jax.random.split(root, 3)
    z = jnp.zeros((2, gan.z_dim), jnp.float32)
    x = jnp.zeros((2, *data_shape), jnp.float32)
    g_params, g_state = split_variables(gan.generator.init(k_g, z, train=False))
    d_params, d_state = split_variables(gan.critic.init(k_d, x, train=False))
    g_state.pop("intermediates", None)
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        g_params=g_params,
        g_state=g_state,
        d_params=d_params,
        d_state=d_state,
        g_opt_state=gan.g_tx.init(g_params),
        d_opt_state=gan.d_tx.init(d_params),
        ema_params=jax.tree.map(jnp.copy, g_params) if ema else None,
        rng=k_run,
    )


def generate(
    gan: GAN, state: TrainState, z: jax.Array, *, use_ema: bool = False
) -> jax.Array:
    """Samples in data space from the generator in inference mode (running BN statistics)."""
    params = state.ema_params if use_ema and state.ema_params is not None else state.g_params
    return gan.generator.apply({"params": params, **state.g_state}, z, train=False)
