"""The data-parallel train step: `n_critic` critic updates and one generator update, compiled once.

`make_train_step(StepConfig(...), mesh, gan)` returns `step(state, real) -> (state, metrics)`,
one jitted function per generator iteration, callable from any loop; `place_state` and
`place_batches` put a state and host batches where it takes them (docs/library.md). Random
numbers for the *global* batch (latents, the penalty's alphas and noise) are drawn first, so
they do not depend on how the batch is split; then a `jax.shard_map` over the mesh's data axis
runs the critic updates in a `lax.scan` and the generator update. Parameters are replicated;
every loss is a local mean turned global by `lax.pmean`, and the gradient is taken of that
global loss. (Taking `pmean` of local gradients instead would be N times too large: with
replicated parameters, JAX already sums the cotangents over devices.)

The step is built from named parts over one frozen `StepBundle` (its `StepConfig` and the
GAN), in the order they run: `check_real`, then `draw_step` draws the iteration's `StepDraws`
(one pytree; `draw_specs` is the matching pytree of the shard_map's specs); on each device
`sharded_step` runs `critic_steps` (a `lax.scan` of `critic_update`: `critic_loss`,
`critic_metrics`), then `generator_update` (`generator_loss`, `generator_metrics`), then
assembles the row (`step_metrics`) and the EMA (`ema_update`).

DiffAugment and instance noise (`StepConfig.augment`, `StepConfig.instance_noise`) change what
the critic sees: every critic input is `augment(x) + sigma * noise`, real and fake, and the
generator's loss scores `augment(G(z)) + sigma * noise`. Their numbers are drawn for the global
batch too (`draw_critic_inputs`, from a key folded off the iteration's key, so with both off
the step draws exactly what it drew before they existed).

Networks that draw random numbers (dropout, noise injection) get a key per device
(`fold_in(key, axis_index)`), critic step and pass, so no two devices or passes share numbers.
Such a network's numbers therefore depend on the device count; networks without randomness
give the same first iteration on 1 and on N devices (tests/test_exactness.py).

Class-conditional runs (`StepConfig.class_frequencies` set) take `real = (images, labels)`.
The labels of the fake examples are drawn for the global batch from those frequencies, before
the split; the generator then gets `(z, labels)` and the critic `(samples, labels)`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import augment, diagnostics, losses, penalties, precision
from wgan_jax.errors import ConfigError
from wgan_jax.state import GAN, TrainState

__all__ = ["StepConfig", "make_train_step", "make_mesh", "place_state", "place_batches",
           "network_key", "ema_warmup_decay", "AXIS", "DIAGNOSTICS_LEVELS", "Metrics"]

#: The mesh axis the batch is split along (`StepConfig.axis_name`, `make_mesh`).
AXIS = "data"
#: The values of `StepConfig.diagnostics` (`config.diagnostics`).
DIAGNOSTICS_LEVELS = ("off", "basic", "full")
NETWORK_STREAM = 0x6E6574  # fold_in tag of the networks' own random numbers ("net")
INPUT_STREAM = 0x617567  # fold_in tag of DiffAugment's and instance noise's numbers ("aug")
LABEL_STREAM = 0x6C6162  # fold_in tag of the fake examples' class labels ("lab")
#: One iteration's metrics row: name -> scalar array.
Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """What the train step needs to know, explicitly (the trainer builds it from its config).

    `penalty` is a name in `penalties.PENALTIES` ("gp", "lp", "r1", "dragan", "r2", "r1r2"),
    "clip" or "none" (no penalty term), or your own `penalties.PenaltyFn`. `ema_decay` applies
    when the state keeps EMA parameters. `diagnostics`: "off", "basic" or "full" (see README).
    `axis_name` is the mesh axis the batch is split along. `augment` is a DiffAugment policy
    ("translation,cutout,color"; "" off) and `instance_noise` the initial standard deviation of
    Gaussian noise on the critic's inputs (0 off), annealed linearly to 0 at iteration
    `num_iterations - 1` (`augment.instance_noise_sigma`). `class_frequencies`: the share of
    each class in the data, for a class-conditional GAN (`()`: unconditional).
    `matmul_precision`: "default", "high" or "highest", the precision the step's float32
    matrix products and convolutions are compiled at (`wgan_jax.precision`).
    """

    n_critic: int = 5
    loss: str = "wasserstein"
    penalty: str | penalties.PenaltyFn = "gp"
    penalty_weight: float = 10.0
    penalty_target: float = 1.0
    dragan_scale: float = 0.5
    ema_decay: float = 0.0
    diagnostics: str = "basic"
    axis_name: str = AXIS
    augment: str = ""
    instance_noise: float = 0.0
    num_iterations: int = 1
    class_frequencies: tuple[float, ...] = ()
    matmul_precision: str = "default"

    def __post_init__(self) -> None:
        if self.matmul_precision not in precision.PRECISIONS:
            raise ConfigError(f"StepConfig.matmul_precision={self.matmul_precision!r}: expected "
                              f"one of {list(precision.PRECISIONS)}")
        try:
            augment.parse_policy(self.augment)
        except ValueError as error:
            raise ConfigError(f"StepConfig.augment={self.augment!r}: {error}") from None
        if not self.instance_noise >= 0.0:
            raise ConfigError(f"StepConfig.instance_noise={self.instance_noise!r}: must be a "
                              "number >= 0")
        if self.num_iterations < 1:
            raise ConfigError(f"StepConfig.num_iterations={self.num_iterations}: must be at "
                              "least 1")
        if self.loss not in losses.CRITIC_LOSSES:
            raise ConfigError(f"StepConfig.loss={self.loss!r}: expected one of "
                              f"{sorted(losses.CRITIC_LOSSES)}")
        names = (*penalties.PENALTIES, *penalties.NOT_PENALTIES)
        if not callable(self.penalty) and self.penalty not in names:
            raise ConfigError(f"StepConfig.penalty={self.penalty!r}: expected one of "
                              f"{list(names)} or a function (see penalties.PenaltyFn)")
        if self.diagnostics not in DIAGNOSTICS_LEVELS:
            raise ConfigError(f"StepConfig.diagnostics={self.diagnostics!r}: expected one of "
                              f"{list(DIAGNOSTICS_LEVELS)}")
        if self.n_critic < 1:
            raise ConfigError(f"StepConfig.n_critic={self.n_critic}: must be at least 1")

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, class_frequencies: tuple[float, ...] = ()
    ) -> StepConfig:
        """The step's settings from a run's config (and its data's class frequencies)."""
        return cls(
            class_frequencies=tuple(class_frequencies),
            n_critic=config.n_critic, loss=config.loss, penalty=config.penalty,
            penalty_weight=config.penalty_weight, penalty_target=config.penalty_target,
            dragan_scale=config.dragan_scale, ema_decay=config.ema_decay,
            diagnostics=config.diagnostics.level, augment=config.augment,
            instance_noise=config.instance_noise, num_iterations=config.num_iterations,
            matmul_precision=config.matmul_precision,
        )

    def penalty_fn(self) -> penalties.PenaltyFn | None:
        """The penalty function to call, or None for "clip"/"none"."""
        if callable(self.penalty):
            return self.penalty
        if self.penalty in penalties.NOT_PENALTIES:
            return None
        fn = penalties.PENALTIES[self.penalty]
        if self.penalty == "dragan":
            return lambda *args, **kw: fn(*args, **kw, scale=self.dragan_scale)
        return fn

    @property
    def draws_noise(self) -> bool:
        """Whether the penalty gets `draws.noise` (DRAGAN's and your own do)."""
        return callable(self.penalty) or self.penalty == "dragan"


class IterationDraws(NamedTuple):
    """An iteration's random numbers for the global batch ([n_critic, B, ...] per critic step)."""

    z_critic: jax.Array
    alpha: jax.Array
    noise: jax.Array  # [n_critic, B, *data] when the penalty uses noise, else [n_critic, B] zeros
    z_generator: jax.Array


def draw_iteration(
    cfg: StepConfig, key: jax.Array, batch: int, data_shape: tuple[int, ...], z_dim: int
) -> IterationDraws:
    """The numbers the step draws from `key` = fold_in(state.rng, state.step)."""
    k_zc, k_alpha, k_noise, k_zg = jax.random.split(key, 4)
    n = cfg.n_critic
    if cfg.draws_noise:
        noise = jax.random.uniform(k_noise, (n, batch, *data_shape), jnp.float32)
    else:
        noise = jnp.zeros((n, batch), jnp.float32)
    return IterationDraws(
        z_critic=jax.random.normal(k_zc, (n, batch, z_dim), jnp.float32),
        alpha=jax.random.uniform(k_alpha, (n, batch), jnp.float32),
        noise=noise,
        z_generator=jax.random.normal(k_zg, (batch, z_dim), jnp.float32),
    )


def network_key(iteration_key: jax.Array, device: jax.Array | int, call: int) -> jax.Array:
    """The key of one network call group: `call` < n_critic is that critic update, n_critic the
    generator update; `device` is the index on the data axis. Passes fold in their own number:
    a critic update's generator pass 0, critic on real 1, on fake 2; the generator update's
    generator pass 0, critic pass 1. `iteration_key` is fold_in(state.rng, state.step)."""
    device_key = jax.random.fold_in(jax.random.fold_in(iteration_key, NETWORK_STREAM), device)
    return jax.random.fold_in(device_key, call)


class InputDraws(NamedTuple):
    """What the critic sees beyond the images: DiffAugment numbers (`augment.draw` dicts, {}
    when off) and instance noise already scaled by this iteration's sigma (None when off).

    The critic's fields have a leading [n_critic] axis, the generator's do not.
    """

    real_augment: augment.Params
    fake_augment: augment.Params
    real_noise: jax.Array | None
    fake_noise: jax.Array | None
    generator_augment: augment.Params
    generator_noise: jax.Array | None


def draw_critic_inputs(
    cfg: StepConfig, key: jax.Array, step: jax.Array, batch: int, data_shape: tuple[int, ...]
) -> tuple[InputDraws, jax.Array]:
    """(the numbers, sigma): the iteration's augmentations and noise for the global batch.

    `key` = fold_in(iteration key, INPUT_STREAM); each field draws from its own fold_in of it.
    """
    n = cfg.n_critic

    def augmentations(tag: int, critic_steps: int | None) -> augment.Params:
        k = jax.random.fold_in(key, tag)
        if critic_steps is None:
            return augment.draw(k, batch, data_shape, cfg.augment)
        return jax.vmap(lambda k: augment.draw(k, batch, data_shape, cfg.augment))(
            jax.random.split(k, critic_steps))

    sigma = augment.instance_noise_sigma(cfg.instance_noise, step, cfg.num_iterations)

    def noise(tag: int, lead: tuple[int, ...]) -> jax.Array | None:
        if cfg.instance_noise <= 0:
            return None
        shape = (*lead, batch, *data_shape)
        return sigma * jax.random.normal(jax.random.fold_in(key, tag), shape, jnp.float32)

    draws = InputDraws(
        real_augment=augmentations(0, n), fake_augment=augmentations(1, n),
        real_noise=noise(3, (n,)), fake_noise=noise(4, (n,)),
        generator_augment=augmentations(2, None), generator_noise=noise(5, ()),
    )
    return draws, sigma


def draw_labels(cfg: StepConfig, key: jax.Array, batch: int) -> tuple[jax.Array, jax.Array]:
    """Class labels of the fake examples, `[n_critic, B]` and `[B]`, from the data's frequencies."""
    logits = jnp.log(jnp.asarray(cfg.class_frequencies, jnp.float32))
    labels = jax.random.categorical(key, logits, shape=(cfg.n_critic + 1, batch))
    return labels[:-1].astype(jnp.int32), labels[-1].astype(jnp.int32)


def _split(x) -> tuple[jax.Array, jax.Array | None]:
    """(samples, labels) of a conditional network's input, (x, None) of an unconditional one."""
    return (x[0], x[1]) if isinstance(x, tuple) else (x, None)


def _join(x: jax.Array, labels: jax.Array | None):
    """The critic's input: `x`, or `(x, labels)` for a conditional critic."""
    return x if labels is None else (x, labels)


def make_mesh(devices: list | None = None, axis_name: str = AXIS) -> Mesh:
    """A 1-D mesh named `axis_name` over all (or the given) devices."""
    devices = jax.devices() if devices is None else devices
    return jax.make_mesh(
        (len(devices),), (axis_name,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )


def place_state(state: Any, mesh: Mesh) -> Any:
    """`state` (any pytree, e.g. a `TrainState`) replicated on every device of `mesh`: what
    the step takes. The result is the step's to donate; `state` itself is left as it is."""
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: jax.device_put(jnp.array(x, copy=True), sharding), state)


def place_batches(real: Any, mesh: Mesh, axis_name: str = AXIS) -> Any:
    """Critic batches `[n_critic, B, ...]` (or `(images, labels)`) split along B over the
    mesh's `axis_name`: what the step takes. `B` must be a multiple of that axis's size
    (`ValueError` in one line otherwise). With several processes, each passes its own rows."""
    sharding = NamedSharding(mesh, P(None, axis_name))
    n = mesh.shape[axis_name]
    images = real[0] if isinstance(real, tuple) else real
    batch = images.shape[1] * jax.process_count()
    if batch % n:
        raise ValueError(_indivisible(batch, n, axis_name))
    if jax.process_count() == 1:
        return jax.tree.map(lambda x: jax.device_put(x, sharding), real)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), real)


def _indivisible(batch: int, devices: int, axis: str) -> str:
    return (f"the batch of {batch} examples does not split over the {devices} devices of the "
            f"mesh's {axis!r} axis: use a multiple of {devices}")


def _to_varying(params, axis: str):
    """Marks replicated params as per-device values once, at the top of a loss.

    Its transpose is the single all-reduce of the summed cotangent. Without it, every use of
    the params (real, fake and interpolated critic passes, the penalty's inner backward)
    gets its own implicit conversion and its own all-reduce: 3-4x the bytes.
    """
    return jax.tree.map(lambda p: lax.pcast(p, axis, to="varying"), params)


def _nonfinite_count(opt_state, field: str = "total_notfinite") -> jax.Array:
    return getattr(opt_state, field, jnp.zeros((), jnp.int32))


class StepDraws(NamedTuple):
    """All of an iteration's random numbers for the global batch, drawn before the split.

    One pytree, so the shard_map takes it with one spec pytree of the same structure
    (`draw_specs`). The networks' own numbers are not drawn here: each device folds them off
    `key` (`network_key`), so they are the only numbers that depend on the device count.
    """

    iteration: IterationDraws  # latents (and fake labels), the penalty's alphas and noise
    key: jax.Array  # fold_in(state.rng, state.step)
    inputs: InputDraws  # DiffAugment's numbers and instance noise


def draw_specs(axis: str) -> StepDraws:
    """Where `StepDraws` live on the mesh: the critic's `[n_critic, B, ...]` and the generator's
    `[B, ...]` split along B over `axis`, the key replicated (the shard_map's in_specs)."""
    critic: Any = P(None, axis)  # a spec where the draws hold arrays
    generator: Any = P(axis)
    return StepDraws(
        iteration=IterationDraws(z_critic=critic, alpha=critic, noise=critic,
                                 z_generator=generator),
        key=P(),  # type: ignore[arg-type]
        inputs=InputDraws(real_augment=critic, fake_augment=critic, real_noise=critic,
                          fake_noise=critic, generator_augment=generator,
                          generator_noise=generator),
    )


def draw_step(
    cfg: StepConfig, z_dim: int, state: TrainState, images: jax.Array
) -> tuple[StepDraws, jax.Array]:
    """(the draws, this iteration's instance-noise sigma) for critic batches `images`
    `[n_critic, B, ...]`; conditional steps (`cfg.class_frequencies`) draw fake labels too."""
    key = jax.random.fold_in(state.rng, state.step)
    batch, data_shape = images.shape[1], images.shape[2:]
    draws = draw_iteration(cfg, key, batch, data_shape, z_dim)
    if cfg.class_frequencies:
        y_critic, y_gen = draw_labels(cfg, jax.random.fold_in(key, LABEL_STREAM), batch)
        draws = draws._replace(z_critic=(draws.z_critic, y_critic),  # type: ignore[arg-type]
                               z_generator=(draws.z_generator, y_gen))  # type: ignore[arg-type]
    inputs, sigma = draw_critic_inputs(cfg, jax.random.fold_in(key, INPUT_STREAM), state.step,
                                       batch, data_shape)
    return StepDraws(draws, key, inputs), sigma


@dataclasses.dataclass(frozen=True)
class StepBundle:
    """What the step's parts need, fixed when the step is built: its settings, the GAN (the
    networks' apply functions and the optimizers) and whether to unroll the critic loop. The
    mesh axis is `cfg.axis_name`; the parts run inside the shard_map over it."""

    cfg: StepConfig
    gan: GAN
    unroll_critic: bool = False

    @property
    def axis(self) -> str:
        return self.cfg.axis_name


def critic_input(b: StepBundle, x, augment_params: augment.Params, noise: jax.Array | None):
    """What the critic scores: the samples augmented (identity for policy ""), plus the noise;
    a conditional critic's labels are passed through unchanged."""
    x, labels = _split(x)
    x = augment.apply(x, augment_params, b.cfg.augment)
    return _join(x if noise is None else x + noise.astype(x.dtype), labels)


def eval_critic(b: StepBundle, d_params, d_state, labels: jax.Array | None = None):
    """The critic as a function of its samples alone (inference mode), for penalties; a
    conditional critic's `labels` are closed over."""
    return lambda x: b.gan.critic.apply(d_params, d_state, _join(x, labels), train=False)[0]


class CriticParts(NamedTuple):
    """The critic loss's local pieces (this device's examples), returned beside its value."""

    loss: jax.Array
    penalty: jax.Array
    real_scores: jax.Array
    fake_scores: jax.Array
    norms: jax.Array | None
    new_state: Any


def critic_loss(
    b: StepBundle, d_params, d_state, real, fake, draws: penalties.Draws, key: jax.Array
) -> tuple[jax.Array, CriticParts]:
    """(the global critic loss with its penalty, the local parts); differentiate the first."""
    cfg, axis, critic = b.cfg, b.axis, b.gan.critic
    d_params = _to_varying(d_params, axis)
    real_scores, d_state_real = critic.apply(
        d_params, d_state, real, train=True, rng=jax.random.fold_in(key, 1))
    fake_scores, new_d_state = critic.apply(
        d_params, d_state_real, fake, train=True, rng=jax.random.fold_in(key, 2))
    loss = losses.CRITIC_LOSSES[cfg.loss](real_scores, fake_scores)
    penalty_fn = cfg.penalty_fn()
    if penalty_fn is None:
        pen, norms, total = jnp.zeros((), jnp.float32), None, loss
    else:
        # Conditional: interpolates between real and fake samples are scored with the REAL
        # labels (as conditional WGAN-GP implementations do).
        (real_x, real_y), (fake_x, _) = _split(real), _split(fake)
        pen, norms = penalty_fn(eval_critic(b, d_params, d_state, real_y), real_x, fake_x,
                                draws, target=cfg.penalty_target, axis_name=axis)
        total = loss + cfg.penalty_weight * pen
    parts = CriticParts(loss, pen, real_scores, fake_scores, norms, new_d_state)
    return lax.pmean(total, axis), parts


def critic_metrics(
    b: StepBundle, parts: CriticParts, grads, updates, d_params, d_state, real, fake
) -> Metrics:
    """One critic update's global metrics, with the diagnostics its level asks for."""
    axis, level = b.axis, b.cfg.diagnostics
    metrics = lax.pmean({
        "critic_loss": parts.loss,
        "gradient_penalty": parts.penalty,
        "d_real": _score_summary(parts.real_scores, b.cfg.loss),
        "d_fake": _score_summary(parts.fake_scores, b.cfg.loss),
        "wasserstein_estimate": jnp.mean(parts.real_scores) - jnp.mean(parts.fake_scores),
    }, axis)
    if level == "off":
        return metrics
    metrics["grad_norm/critic"] = diagnostics.global_norm(grads)
    if parts.norms is not None:
        metrics["input_grad_norm/interp_mean"] = lax.pmean(jnp.mean(parts.norms), axis)
        metrics["input_grad_norm/interp_max"] = lax.pmax(jnp.max(parts.norms), axis)
    if level == "full":
        metrics.update(_layer_stats(grads, updates, d_params, "critic"))
        for name, x in (("real", real), ("fake", fake)):
            x, labels = _split(x)
            norms = penalties.input_gradient_norms(eval_critic(b, d_params, d_state, labels), x)
            metrics[f"input_grad_norm/{name}_mean"] = lax.pmean(jnp.mean(norms), axis)
    return metrics


class CriticCarry(NamedTuple):
    """What one critic update hands the next (the generator's part is only read)."""

    g_params: Any
    g_state: Any
    d_params: Any
    d_state: Any
    d_opt_state: Any


class CriticInputs(NamedTuple):
    """One critic update's slice of the scanned inputs (leading axis `n_critic` when stacked):
    its real batch, latents, penalty draws, network key, augmentations and noise."""

    real: Any
    z: Any
    alpha: jax.Array
    noise: jax.Array
    key: jax.Array
    real_augment: augment.Params
    fake_augment: augment.Params
    real_noise: jax.Array | None
    fake_noise: jax.Array | None


def critic_update(
    b: StepBundle, carry: CriticCarry, inputs: CriticInputs
) -> tuple[CriticCarry, Metrics]:
    """One critic step: score real and (fixed) fake, take the gradient, apply the update."""
    g_params, g_state, d_params, d_state, d_opt_state = carry
    fake, _ = b.gan.generator.apply(g_params, g_state, inputs.z, train=True,
                                    rng=jax.random.fold_in(inputs.key, 0))
    # The critic's loss and its penalty see only the augmented, noisy real and fake.
    real = critic_input(b, inputs.real, inputs.real_augment, inputs.real_noise)
    fake = critic_input(b, _join(lax.stop_gradient(fake), _split(inputs.z)[1]),
                        inputs.fake_augment, inputs.fake_noise)
    draws = penalties.Draws(inputs.alpha, inputs.noise if b.cfg.draws_noise else None)
    (_, parts), grads = jax.value_and_grad(functools.partial(critic_loss, b), has_aux=True)(
        d_params, d_state, real, fake, draws, inputs.key)
    updates, d_opt_state = b.gan.d_tx.update(grads, d_opt_state, d_params)
    metrics = critic_metrics(b, parts, grads, updates, d_params, d_state, real, fake)
    d_params = optax.apply_updates(d_params, updates)
    return CriticCarry(g_params, g_state, d_params, parts.new_state, d_opt_state), metrics


def critic_steps(
    b: StepBundle, state: TrainState, real, draws: StepDraws, device: jax.Array
) -> tuple[CriticCarry, Metrics]:
    """The `n_critic` critic updates in a `lax.scan`; metrics stacked `[n_critic]`."""
    n = b.cfg.n_critic
    keys = jax.vmap(lambda i: network_key(draws.key, device, i))(jnp.arange(n))
    carry = CriticCarry(state.g_params, state.g_state, state.d_params, state.d_state,
                        state.d_opt_state)
    it, seen = draws.iteration, draws.inputs
    inputs = CriticInputs(real, it.z_critic, it.alpha, it.noise, keys, seen.real_augment,
                          seen.fake_augment, seen.real_noise, seen.fake_noise)
    return lax.scan(functools.partial(critic_update, b), carry, inputs,
                    unroll=n if b.unroll_critic else 1)


def generator_loss(
    b: StepBundle, g_params, g_state, d_params, d_state, z, key: jax.Array, seen, real
) -> tuple[jax.Array, tuple[Any, Any, dict]]:
    """(the global generator loss, (its new state, the fakes, captured activations)).

    `seen` is (augmentations, noise) of what the critic sees; `real` is the last critic batch,
    which a relativistic (paired) loss scores beside the fakes.
    """
    cfg, axis, generator, critic = b.cfg, b.axis, b.gan.generator, b.gan.critic
    g_params = _to_varying(g_params, axis)
    g_key = jax.random.fold_in(key, 0)
    if cfg.diagnostics == "full" and generator.capture is not None:
        fake, new_g_state, acts = generator.capture(g_params, g_state, z, train=True, rng=g_key)
    else:
        (fake, new_g_state), acts = generator.apply(g_params, g_state, z, train=True,
                                                    rng=g_key), {}
    seen_fake = critic_input(b, _join(fake, _split(z)[1]), *seen)
    scores, _ = critic.apply(d_params, d_state, seen_fake, train=True,
                             rng=jax.random.fold_in(key, 1))
    loss_fn = losses.GENERATOR_LOSSES[cfg.loss]
    if cfg.loss in losses.PAIRED_LOSSES:  # fake i pairs with real i (the last critic batch's)
        real_scores, _ = critic.apply(d_params, d_state, critic_input(b, real, *seen),
                                      train=True, rng=jax.random.fold_in(key, 2))
        loss = loss_fn(scores, lax.stop_gradient(real_scores))
    else:
        loss = loss_fn(scores)
    return lax.pmean(loss, axis), (new_g_state, fake, acts)


def generator_metrics(
    b: StepBundle, loss: jax.Array, grads, updates, g_params, fake, real, acts: dict
) -> Metrics:
    """The generator update's global metrics, with the diagnostics its level asks for."""
    axis, level = b.axis, b.cfg.diagnostics
    metrics = {"generator_loss": loss}
    if level == "off":
        return metrics
    metrics["grad_norm/generator"] = diagnostics.global_norm(grads)
    if level == "full":
        metrics.update(_layer_stats(grads, updates, g_params, "generator"))
        relus = {k: v for k, v in acts.items() if "relu" in k}
        tanhs = [v for k, v in acts.items() if "tanh" in k]
        if relus:
            metrics["dead_units/generator"] = diagnostics.dead_fraction(relus, axis)
        if tanhs:
            metrics["saturated/generator"] = diagnostics.saturated_fraction(
                tanhs[0], axis_name=axis)
        metrics["diversity"] = diagnostics.pairwise_diversity(fake, real, axis_name=axis)
    return metrics


def generator_update(
    b: StepBundle, state: TrainState, d_params, d_state, z, real, key: jax.Array, seen
) -> tuple[Any, Any, Any, Metrics]:
    """The generator step against the updated critic: (params, state, optimizer state,
    metrics)."""
    (loss, (new_g_state, fake, acts)), grads = jax.value_and_grad(
        functools.partial(generator_loss, b), has_aux=True
    )(state.g_params, state.g_state, d_params, d_state, z, key, seen, real)
    updates, g_opt_state = b.gan.g_tx.update(grads, state.g_opt_state, state.g_params)
    metrics = generator_metrics(b, loss, grads, updates, state.g_params,
                                lax.stop_gradient(fake), _split(real)[0],
                                lax.stop_gradient(acts))
    g_params = optax.apply_updates(state.g_params, updates)
    return g_params, new_g_state, g_opt_state, metrics


def step_metrics(generator: Metrics, critic: Metrics, g_opt_state, d_opt_state) -> Metrics:
    """The iteration's row: the generator's metrics, the critic's averaged over its updates
    (the interpolates' max norm: their max), and the counts of updates skipped as non-finite."""
    metrics = dict(generator)
    metrics.update(jax.tree.map(jnp.mean, critic))
    if "input_grad_norm/interp_max" in critic:
        metrics["input_grad_norm/interp_max"] = jnp.max(critic["input_grad_norm/interp_max"])
    metrics["nonfinite_skipped"] = (
        _nonfinite_count(g_opt_state) + _nonfinite_count(d_opt_state)
    ).astype(jnp.float32)
    metrics["nonfinite_consecutive"] = jnp.maximum(
        _nonfinite_count(g_opt_state, "notfinite_count"),
        _nonfinite_count(d_opt_state, "notfinite_count"),
    ).astype(jnp.float32)
    return metrics


def ema_update(decay: float, state: TrainState, g_params) -> Any:
    """The generator's EMA parameters after this iteration (None when the state keeps none)."""
    ema = state.ema_params
    if ema is None:
        return None
    decay = ema_warmup_decay(decay, state.step)  # type: ignore[assignment]
    return jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, g_params)


def sharded_step(
    b: StepBundle, state: TrainState, real, draws: StepDraws
) -> tuple[TrainState, Metrics]:
    """One iteration on one device's share of the batch (inside the shard_map)."""
    device = lax.axis_index(b.axis)  # this device's own numbers
    carry, critic = critic_steps(b, state, real, draws, device)
    seen = (draws.inputs.generator_augment, draws.inputs.generator_noise)
    g_params, g_state, g_opt_state, generator = generator_update(
        b, state, carry.d_params, carry.d_state, draws.iteration.z_generator,
        jax.tree.map(lambda a: a[-1], real), network_key(draws.key, device, b.cfg.n_critic),
        seen,
    )
    metrics = step_metrics(generator, critic, g_opt_state, carry.d_opt_state)
    ema = ema_update(b.cfg.ema_decay, state, g_params)
    new_state = state.replace(  # type: ignore[attr-defined]
        step=state.step + 1,
        g_params=g_params,
        g_state=g_state,
        d_params=carry.d_params,
        d_state=carry.d_state,
        g_opt_state=g_opt_state,
        d_opt_state=carry.d_opt_state,
        ema_params=ema,
    )
    return new_state, jax.tree.map(lambda m: m.astype(jnp.float32), metrics)


def check_real(cfg: StepConfig, mesh: Mesh, real) -> jax.Array:
    """The images of `real` after checking its form against the step (`ValueError` in one line
    otherwise): (images, labels) exactly when conditional, `[n_critic, B, ...]`, B divisible."""
    images, labels = _split(real)
    axis = cfg.axis_name
    if (labels is None) == bool(cfg.class_frequencies):
        raise ValueError("a conditional step (StepConfig.class_frequencies) takes "
                         "real = (images, labels), an unconditional one images only")
    if images.ndim < 2 or images.shape[0] != cfg.n_critic:
        raise ValueError(f"real has shape {list(images.shape)}: expected [n_critic="
                         f"{cfg.n_critic}, batch, ...] (StepConfig.n_critic critic batches)")
    if images.shape[1] % mesh.shape[axis]:
        raise ValueError(_indivisible(images.shape[1], mesh.shape[axis], axis))
    return images


def make_train_step(
    cfg: StepConfig,
    mesh: Mesh,
    gan: GAN,
    *,
    unroll_critic: bool = False,
) -> Callable[[TrainState, jax.Array], tuple[TrainState, Metrics]]:
    """Builds `step(state, real) -> (state, metrics)`; `real` is [n_critic, B, ...].

    `real` is split over `cfg.axis_name` of `mesh` (B divisible by its size); `state` is
    replicated and donated. `metrics` are float32 scalars, already averaged over the global
    batch. `unroll_critic` unrolls the critic loop (same function, longer compile): XLA's cost
    analysis counts a loop body once, so the benchmarks count FLOPs on the unrolled step.
    The step is traced inside `precision.scope(cfg.matmul_precision)`.
    """
    axis = cfg.axis_name
    if axis not in mesh.axis_names:
        raise ConfigError(f"StepConfig.axis_name={axis!r} is not an axis of the mesh "
                          f"{dict(mesh.shape)}")
    bundle = StepBundle(cfg, gan, unroll_critic)
    mapped = jax.shard_map(
        functools.partial(sharded_step, bundle),
        mesh=mesh,
        in_specs=(P(), P(None, axis), draw_specs(axis)),
        out_specs=(P(), P()),
    )

    def step(state: TrainState, real) -> tuple[TrainState, Metrics]:
        images = check_real(cfg, mesh, real)
        draws, sigma = draw_step(cfg, gan.z_dim, state, images)
        state, metrics = mapped(state, real, draws)
        if cfg.instance_noise > 0:
            metrics["instance_noise_sigma"] = sigma.astype(jnp.float32)
        return state, metrics

    return jax.jit(precision.within(cfg.matmul_precision, step), donate_argnums=0)


def ema_warmup_decay(decay: float, step: jax.Array) -> jax.Array:
    """The EMA decay at (0-based) `step`: min(decay, (1 + step) / (10 + step)).

    Early on the average follows the weights closely, so a long-horizon EMA (0.999) of a short
    run is not dominated by the random initial weights it started from.
    """
    step = jnp.asarray(step, jnp.float32)
    return jnp.minimum(decay, (1.0 + step) / (10.0 + step))


def _layer_stats(grads, updates, params, name: str) -> Metrics:
    """Per-layer gradient norms, weight norms and update/weight ratios (full diagnostics)."""
    stats = diagnostics.layer_norms(grads, f"grad_norm/{name}")
    stats.update(diagnostics.layer_norms(params, f"weight_norm/{name}"))
    stats.update(diagnostics.update_ratios(updates, params, f"update_ratio/{name}"))
    return stats


def _score_summary(scores: jax.Array, loss_name: str) -> jax.Array:
    """Mean critic output: a probability for the logistic loss, the raw score otherwise."""
    if loss_name == "logistic":
        return jnp.mean(jax.nn.sigmoid(scores))
    return jnp.mean(scores)
