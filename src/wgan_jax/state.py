"""The training state pytree, the GAN bundle (modules + optimizers), and their construction.

`TrainState` is the one source of truth: the step consumes and returns it, checkpoints save it
whole. Its random key is a base key; iteration `t` uses `fold_in(rng, t)`, so a resumed run
draws exactly the numbers an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from wgan_jax.models.contract import Model, as_model
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
    """The static parts of a run: the two networks, their optimizers and the latent size.

    `generator` and `critic` are anything `models.contract.as_model` accepts (an NNX or Linen
    module, an `(init, apply)` pair, a `Model`) and are stored as `Model`s: a generator maps
    latents `[B, z_dim]` to samples, a critic maps samples to scores `[B]`. Both optimizers
    are wrapped in `optax.apply_if_finite` unless they already are, so a non-finite update is
    skipped and counted whatever optimizer is given. `num_classes > 0`: class-conditional
    networks, which take `(latents, labels)` and `(samples, labels)`.
    """

    generator: Model
    critic: Model
    g_tx: optax.GradientTransformation
    d_tx: optax.GradientTransformation
    z_dim: int
    num_classes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "generator", as_model(self.generator))
        object.__setattr__(self, "critic", as_model(self.critic))
        object.__setattr__(self, "g_tx", skip_nonfinite(self.g_tx))
        object.__setattr__(self, "d_tx", skip_nonfinite(self.d_tx))


NEVER_GIVE_UP = 2**30  # count skipped updates, never give up inside the step


def skip_nonfinite(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` wrapped in `optax.apply_if_finite` (never giving up), unless it already is.

    "Already" means its state is an `ApplyIfFiniteState` (tested on an empty tree). Wrapping
    twice would be harmless anyway: the outer guard sees a non-finite update first.
    """
    try:
        wrapped = isinstance(tx.init({}), optax.ApplyIfFiniteState)
    except Exception:  # noqa: BLE001 - an optimizer that needs real params: wrap it
        wrapped = False
    return tx if wrapped else optax.apply_if_finite(tx, max_consecutive_errors=NEVER_GIVE_UP)


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
    return skip_nonfinite(g_tx), skip_nonfinite(d_tx)


def create_train_state(gan: GAN, data_shape: tuple[int, ...], seed: int, ema: bool) -> TrainState:
    """Initialises both networks and optimizers from `seed` (on the host, replicated)."""
    root = jax.random.PRNGKey(seed)
    k_g, k_d, k_run = jax.random.split(root, 3)
    z = jnp.zeros((2, gan.z_dim), jnp.float32)
    x = jnp.zeros((2, *data_shape), jnp.float32)
    if gan.num_classes:
        labels = jnp.zeros((2,), jnp.int32)
        z, x = (z, labels), (x, labels)
    g_params, g_state = gan.generator.init(k_g, z)
    d_params, d_state = gan.critic.init(k_d, x)
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


def apply_generator(
    gan: GAN, state: TrainState, z: jax.Array, *, use_ema: bool = False,
    labels: jax.Array | None = None,
) -> jax.Array:
    """Latents `z` -> samples, the generator in inference mode (running BN statistics).

    A conditional generator makes sample i of class `labels[i]`; without `labels`, of class
    `i % num_classes` (every class equally often: progress pictures).
    """
    params = state.ema_params if use_ema and state.ema_params is not None else state.g_params
    if gan.num_classes:
        if labels is None:
            labels = jnp.arange(z.shape[0], dtype=jnp.int32) % gan.num_classes
        z = (z, jnp.asarray(labels, jnp.int32))
    out, _ = gan.generator.apply(params, state.g_state, z, train=False)
    return out
