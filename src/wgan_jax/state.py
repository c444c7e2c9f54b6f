"""The training state pytree, the GAN bundle (modules + optimizers), and their construction.

`TrainState` is the one source of truth: the step consumes and returns it, checkpoints save it
whole. Its random key is a base key; iteration `t` uses `fold_in(rng, t)`, so a resumed run
draws exactly the numbers an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from wgan_jax.models.checks import as_checked_model, check_gan
from wgan_jax.models.contract import Model, nnx_filters
from wgan_jax.penalties import clip_weights

__all__ = ["TrainState", "GAN", "create_train_state", "update_modules", "trained_modules",
           "apply_generator", "OptimizerConfig", "make_optimizers", "skip_nonfinite", "gan_program",
           "PyTree"]

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
    networks, which take `(latents, labels)` and `(samples, labels)` (an NNX or Linen module
    whose `__call__` takes `labels` gets them as `labels=...`). A network that is not one of
    these kinds is a `ValueError` naming it (`errors.NetworkError`).
    """

    generator: Model
    critic: Model
    g_tx: optax.GradientTransformation
    d_tx: optax.GradientTransformation
    z_dim: int
    num_classes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "generator", as_checked_model(self.generator, "generator"))
        object.__setattr__(self, "critic", as_checked_model(self.critic, "critic"))
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


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """What `make_optimizers` needs (the config keys of the same names; built once by
    `from_config`). `clip_value`: the critic's weights are kept in [-clip_value, clip_value]
    after each update (weight clipping, `penalty="clip"`); None: no clipping."""

    generator_lr: float
    critic_lr: float
    generator_b1: float = 0.5
    generator_b2: float = 0.9
    critic_b1: float = 0.5
    critic_b2: float = 0.9
    lr_schedule: str = "constant"  # or "linear": decay to 0 over the run
    num_iterations: int = 1
    n_critic: int = 5
    clip_value: float | None = None

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> OptimizerConfig:
        """The optimizer settings of a run's config."""
        return cls(
            generator_lr=config.generator_lr, critic_lr=config.critic_lr,
            generator_b1=config.generator_b1, generator_b2=config.generator_b2,
            critic_b1=config.critic_b1, critic_b2=config.critic_b2,
            lr_schedule=config.lr_schedule, num_iterations=config.num_iterations,
            n_critic=config.n_critic,
            clip_value=config.clip_value if config.penalty == "clip" else None,
        )


def make_optimizers(
    opt: OptimizerConfig, lr_scale: float = 1.0
) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """Adam for G and D with their own learning rates, betas and schedules.

    A schedule counts its own network's updates, so the critic's spans `n_critic` times more
    steps. Non-finite gradients skip the update (`optax.apply_if_finite`) and are counted in
    the optimizer state. `lr_scale` lowers both rates after a rollback.
    """
    total = opt.num_iterations
    g_tx = optax.adam(
        _schedule(opt.generator_lr * lr_scale, opt.lr_schedule, total),
        b1=opt.generator_b1,
        b2=opt.generator_b2,
    )
    d_tx = optax.adam(
        _schedule(opt.critic_lr * lr_scale, opt.lr_schedule, total * opt.n_critic),
        b1=opt.critic_b1,
        b2=opt.critic_b2,
    )
    if opt.clip_value is not None:
        d_tx = optax.chain(d_tx, clip_weights(opt.clip_value))
    return skip_nonfinite(g_tx), skip_nonfinite(d_tx)


def create_train_state(
    gan: GAN, data_shape: tuple[int, ...], seed: int, ema: bool, *, check: bool = True,
    axis_name: str = "data",
) -> TrainState:
    """Initialises both networks and optimizers (on the host, not yet placed on a mesh).

    `seed` gives the run's base key (`TrainState.rng`: latents, penalty draws, the networks'
    dropout keys) and the initial weights of Linen modules and `(init, apply)` pairs; an NNX
    module is already initialised, so its weights are its own (seed them with the `nnx.Rngs`
    you construct it with) and `seed` only picks the run's random numbers.

    The state owns its arrays: they are copies, never the buffers of your NNX modules, so the
    train step (which donates its state) cannot delete what your modules hold. With `check`
    (the default) the networks are first checked at the door (`models.checks.check_gan`): a
    wrong network is a `ValueError` naming it, what was expected and what was found. A critic
    with (global-batch) BatchNorm, for penalty "clip" or "none" only, needs `check=False`.
    `axis_name` is the mesh axis the batch will be split along (the step's).
    """
    if check:
        check_gan(gan, data_shape, axis_name=axis_name)
    return _init_state(gan, data_shape, ema, jax.random.PRNGKey(seed))


def _init_state(gan: GAN, data_shape: tuple[int, ...], ema: bool, root: jax.Array) -> TrainState:
    """Both networks' and optimizers' initial state from the base key `root`, as one compiled
    program: run op by op, a DCGAN's initialisers alone compiled ~125 small XLA programs, ~8
    CPU-s of every run's start on a 2-core CPU. The networks' `init` is traceable by contract
    (`check_gan` traces it with `jax.eval_shape`)."""

    def init(root: jax.Array) -> TrainState:
        k_g, k_d, k_run = jax.random.split(root, 3)
        z: Any = jnp.zeros((2, gan.z_dim), jnp.float32)
        x: Any = jnp.zeros((2, *data_shape), jnp.float32)
        if gan.num_classes:
            labels = jnp.zeros((2,), jnp.int32)
            z, x = (z, labels), (x, labels)
        g_params, g_state = _owned(gan.generator.init(k_g, z))
        d_params, d_state = _owned(gan.critic.init(k_d, x))
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

    return jax.jit(init)(root)


def _owned(tree: PyTree) -> PyTree:
    """Fresh copies of every array of `tree` (an NNX module's init returns its own buffers)."""
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def update_modules(
    state: TrainState, generator: Any = None, critic: Any = None, *, use_ema: bool = False
) -> None:
    """Writes `state`'s weights and statistics into your Flax NNX modules, in place.

    `generator` gets the generator's parameters (the EMA ones with `use_ema`) and its other
    variables (BatchNorm statistics), `critic` the critic's; either may be None. Afterwards
    `generator(z)` (in `generator.eval()` mode) samples what `apply_generator(gan, state, z,
    use_ema=use_ema)` does. The modules get fresh arrays on the default device, so training on
    does not delete them. A module whose variables do not match the state raises `ValueError`.
    """
    if use_ema and state.ema_params is None:
        raise ValueError("update_modules(use_ema=True): this state keeps no EMA parameters "
                         "(ema=False / config.ema_decay == 0)")
    g_params = state.ema_params if use_ema else state.g_params
    for name, module, params, other in (("generator", generator, g_params, state.g_state),
                                        ("critic", critic, state.d_params, state.d_state)):
        if module is not None:
            _write_module(name, module, params, other)


def trained_modules(
    state: TrainState, generator: Any, critic: Any, *, use_ema: bool
) -> dict[str, Any]:
    """{"generator": ..., "critic": ...}: copies of those of your networks that are NNX modules
    holding `state`'s weights (`update_modules` on an `nnx.clone`); yours are left as they are."""
    out = {}
    for name, module in (("generator", generator), ("critic", critic)):
        if isinstance(module, nnx.Module):
            copy = nnx.clone(module)
            kwargs = {name: copy}
            update_modules(state, **kwargs, use_ema=use_ema and name == "generator")
            out[name] = copy
    return out


def _local(x: Any) -> Any:
    """A replicated array's local copy (a global array of several processes included)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x.addressable_data(0)
    return jax.device_get(x)


def _write_module(name: str, module: Any, params: PyTree, other: PyTree) -> None:
    if not isinstance(module, nnx.Module):
        raise ValueError(f"update_modules: the {name} is a {type(module).__qualname__}, not a "
                         "Flax NNX module (Linen modules and function pairs keep no weights: "
                         "use apply_generator or runs.generate_samples)")
    for values, selector in zip((params, other), nnx_filters(), strict=True):
        target = nnx.state(module, selector)
        fresh = jax.tree.map(lambda x: jnp.asarray(np.array(_local(x))), values)
        have = jax.tree.map(jnp.shape, nnx.to_pure_dict(target))
        if have != jax.tree.map(jnp.shape, fresh):
            raise ValueError(f"update_modules: the {name} module's variables do not match the "
                             f"state's (module {have}, state "
                             f"{jax.tree.map(jnp.shape, fresh)})")
        nnx.replace_by_pure_dict(target, fresh)
        nnx.update(module, target)


_PROGRAMS: dict[str, Any] = {"gan": None, "fns": {}}  # the most recent GAN's, per key


def gan_program(gan: GAN, key: Hashable, build: Callable[[], Callable]) -> Callable:
    """The function `key` compiled for `gan` (`build()` on first use), kept across calls for
    the most recent GAN only: a new GAN object (e.g. after a rollback) builds anew, and the last
    one's programs are released. Evaluation, `sample` and the trainer's pictures share them."""
    if _PROGRAMS["gan"] is not gan:
        _PROGRAMS.update(gan=gan, fns={})
    fns = _PROGRAMS["fns"]
    if key not in fns:
        fns[key] = build()
    return fns[key]


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
        inputs: Any = (z, jnp.asarray(labels, jnp.int32))
    else:
        inputs = z
    out, _ = gan.generator.apply(params, state.g_state, inputs, train=False)
    return out
