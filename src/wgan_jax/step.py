"""The data-parallel train step: `n_critic` critic updates and one generator update, compiled once.

The whole generator iteration is one jitted function: random numbers for the *global* batch
are drawn first (so they do not depend on how the batch is split), then a `jax.shard_map` over
the 1-D `data` mesh runs the critic updates in a `lax.scan` and the generator update.
Parameters are replicated; every loss is a local mean turned global by `lax.pmean`, and the
gradient is taken of that global loss. (Taking `pmean` of local gradients instead would be
N times too large: with replicated parameters, JAX already sums the cotangents over devices.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from wgan_jax import diagnostics, losses, penalties
from wgan_jax.state import GAN, TrainState

AXIS = "data"
Metrics = dict[str, jax.Array]


def make_mesh(devices: list | None = None) -> Mesh:
    """A 1-D mesh named `data` over all (or the given) devices."""
    devices = jax.devices() if devices is None else devices
    return jax.make_mesh(
        (len(devices),), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )


def _apply(module, params, state, x, *, train: bool) -> tuple[jax.Array, Any]:
    """Applies a module, returning the output and its updated non-param collections."""
    mutable = [k for k in state if k != "intermediates"] if train else False
    if mutable:
        out, new_state = module.apply({"params": params, **state}, x, train=train, mutable=mutable)
        return out, {**state, **new_state}
    return module.apply({"params": params, **state}, x, train=train), state


def _to_varying(params):
    """Marks replicated params as per-device values once, at the top of a loss.

    Its transpose is the single all-reduce of the summed cotangent. Without it, every use of
    the params (real, fake and interpolated critic passes, the penalty's inner backward)
    gets its own implicit conversion and its own all-reduce: 3-4x the bytes.
    """
    return jax.tree.map(lambda p: lax.pcast(p, AXIS, to="varying"), params)


def _nonfinite_count(opt_state, field: str = "total_notfinite") -> jax.Array:
    return getattr(opt_state, field, jnp.zeros((), jnp.int32))


def make_train_step(
    config: ml_collections.ConfigDict,
    mesh: Mesh,
    gan: GAN,
    data_shape: tuple[int, ...],
    *,
    unroll_critic: bool = False,
) -> Callable[[TrainState, jax.Array], tuple[TrainState, Metrics]]:
    """Builds `step(state, real) -> (state, metrics)`; `real` is [n_critic, B, *data_shape].

    `state` is donated. `metrics` are float32 scalars, already averaged over the global batch.
    `unroll_critic` unrolls the critic loop (same function, longer compile): XLA's cost
    analysis counts a loop body once, so the benchmarks count FLOPs on the unrolled step.
    """
    n_critic = config.n_critic
    batch = config.global_batch_size
    loss_name, penalty = config.loss, config.penalty
    weight, target = config.penalty_weight, config.penalty_target
    critic_loss_fn = losses.CRITIC_LOSSES[loss_name]
    generator_loss_fn = losses.GENERATOR_LOSSES[loss_name]
    ema_decay = config.ema_decay
    diag_level = config.diagnostics.level

    def critic_scores(d_params, d_state, x):
        return _apply(gan.critic, d_params, d_state, x, train=True)

    def critic_update(carry, inputs):
        g_params, g_state, d_params, d_state, d_opt_state = carry
        real, z, alpha, noise = inputs
        fake, _ = _apply(gan.generator, g_params, g_state, z, train=True)
        fake = lax.stop_gradient(fake)

        def loss_fn(d_params):
            d_params = _to_varying(d_params)
            real_scores, new_d_state = critic_scores(d_params, d_state, real)
            fake_scores, new_d_state = critic_scores(d_params, new_d_state, fake)
            loss = critic_loss_fn(real_scores, fake_scores)

            def score_fn(x):
                return gan.critic.apply({"params": d_params, **d_state}, x, train=False)

            if penalty in ("gp", "lp"):
                norms = penalties.input_gradient_norms(
                    score_fn, penalties.interpolate_with(real, fake, alpha)
                )
                pen = penalties.penalty_from_norms(norms, target=target, one_sided=penalty == "lp")
            elif penalty == "dragan":
                std = jnp.sqrt(
                    lax.pmean(jnp.mean(jnp.square(real)), AXIS)
                    - jnp.square(lax.pmean(jnp.mean(real), AXIS))
                )
                points = penalties.dragan_points(real, noise, alpha, std, config.dragan_scale)
                norms = penalties.input_gradient_norms(score_fn, points)
                pen = penalties.penalty_from_norms(norms, target=target)
            elif penalty == "r1":
                norms = penalties.input_gradient_norms(score_fn, real)
                pen = jnp.mean(jnp.square(norms))
            else:
                norms, pen = None, jnp.zeros((), jnp.float32)
            total = loss + weight * pen if penalty not in ("none", "clip") else loss
            local = {
                "critic_loss": loss,
                "gradient_penalty": pen,
                "d_real": _score_summary(real_scores, loss_name),
                "d_fake": _score_summary(fake_scores, loss_name),
                "wasserstein_estimate": jnp.mean(real_scores) - jnp.mean(fake_scores),
            }
            if norms is not None and diag_level != "off":
                local["input_grad_norm/interp_mean"] = jnp.mean(norms)
            aux = lax.pmean(lax.stop_gradient(local), AXIS)
            if norms is not None and diag_level != "off":
                aux["input_grad_norm/interp_max"] = lax.pmax(
                    lax.stop_gradient(jnp.max(norms)), AXIS
                )
            return lax.pmean(total, AXIS), (aux, new_d_state)

        (_, (aux, new_d_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(d_params)
        updates, d_opt_state = gan.d_tx.update(grads, d_opt_state, d_params)
        if diag_level != "off":
            aux["grad_norm/critic"] = diagnostics.global_norm(grads)
        if diag_level == "full":
            aux.update(_layer_stats(grads, updates, d_params, "critic"))

            def score_fn(x):
                return gan.critic.apply({"params": d_params, **d_state}, x, train=False)

            for name, x in (("real", real), ("fake", fake)):
                norms = penalties.input_gradient_norms(score_fn, x)
                aux[f"input_grad_norm/{name}_mean"] = lax.pmean(jnp.mean(norms), AXIS)
        d_params = optax.apply_updates(d_params, updates)
        return (g_params, g_state, d_params, new_d_state, d_opt_state), aux

    def generator_update(state: TrainState, d_params, d_state, z, real):
        full = diag_level == "full"

        def loss_fn(g_params):
            g_vars = {"params": _to_varying(g_params), **state.g_state}
            mutable = [k for k in state.g_state if k != "intermediates"]
            if full:
                mutable.append("intermediates")
            fake, new_g_state = gan.generator.apply(g_vars, z, train=True, mutable=mutable)
            scores, _ = critic_scores(d_params, d_state, fake)
            acts = new_g_state.pop("intermediates", {}) if full else {}
            new_g_state = {**state.g_state, **new_g_state}
            return lax.pmean(generator_loss_fn(scores), AXIS), (new_g_state, fake, acts)

        (loss, (new_g_state, fake, acts)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.g_params
        )
        updates, g_opt_state = gan.g_tx.update(grads, state.g_opt_state, state.g_params)
        metrics = {"generator_loss": loss}
        if diag_level != "off":
            metrics["grad_norm/generator"] = diagnostics.global_norm(grads)
        if full:
            metrics.update(_layer_stats(grads, updates, state.g_params, "generator"))
            acts = lax.stop_gradient(acts)
            relus = {k: v for k, v in _flat(acts).items() if "relu" in k}
            tanhs = [v for k, v in _flat(acts).items() if "tanh" in k]
            if relus:
                metrics["dead_units/generator"] = diagnostics.dead_fraction(relus, AXIS)
            if tanhs:
                metrics["saturated/generator"] = diagnostics.saturated_fraction(
                    tanhs[0], axis_name=AXIS
                )
            metrics["diversity"] = diagnostics.pairwise_diversity(
                lax.stop_gradient(fake), real, axis_name=AXIS
            )
        g_params = optax.apply_updates(state.g_params, updates)
        return g_params, new_g_state, g_opt_state, metrics

    def sharded_step(state: TrainState, real, z_critic, alpha, noise, z_gen):
        carry = (state.g_params, state.g_state, state.d_params, state.d_state, state.d_opt_state)
        carry, critic_metrics = lax.scan(
            critic_update, carry, (real, z_critic, alpha, noise),
            unroll=n_critic if unroll_critic else 1,
        )
        _, _, d_params, d_state, d_opt_state = carry
        g_params, g_state, g_opt_state, metrics = generator_update(
            state, d_params, d_state, z_gen, real[-1]
        )
        metrics.update(jax.tree.map(jnp.mean, critic_metrics))
        if "input_grad_norm/interp_max" in critic_metrics:
            metrics["input_grad_norm/interp_max"] = jnp.max(
                critic_metrics["input_grad_norm/interp_max"]
            )
        metrics["nonfinite_skipped"] = (
            _nonfinite_count(g_opt_state) + _nonfinite_count(d_opt_state)
        ).astype(jnp.float32)
        metrics["nonfinite_consecutive"] = jnp.maximum(
            _nonfinite_count(g_opt_state, "notfinite_count"),
            _nonfinite_count(d_opt_state, "notfinite_count"),
        ).astype(jnp.float32)
        ema = state.ema_params
        if ema is not None:
            decay = ema_warmup_decay(ema_decay, state.step)
            ema = jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, g_params)
        new_state = state.replace(
            step=state.step + 1,
            g_params=g_params,
            g_state=g_state,
            d_params=d_params,
            d_state=d_state,
            g_opt_state=g_opt_state,
            d_opt_state=d_opt_state,
            ema_params=ema,
        )
        return new_state, jax.tree.map(lambda m: m.astype(jnp.float32), metrics)

    batch_spec = P(None, AXIS)
    mapped = jax.shard_map(
        sharded_step,
        mesh=mesh,
        in_specs=(P(), batch_spec, batch_spec, batch_spec, batch_spec, P(AXIS)),
        out_specs=(P(), P()),
    )

    def draw(key: jax.Array):
        """The iteration's random numbers for the global batch (independent of the split)."""
        k_zc, k_alpha, k_noise, k_zg = jax.random.split(key, 4)
        z_critic = jax.random.normal(k_zc, (n_critic, batch, gan.z_dim), jnp.float32)
        alpha = jax.random.uniform(k_alpha, (n_critic, batch), jnp.float32)
        if penalty == "dragan":
            noise = jax.random.uniform(k_noise, (n_critic, batch, *data_shape), jnp.float32)
        else:
            noise = jnp.zeros((n_critic, batch), jnp.float32)
        z_gen = jax.random.normal(k_zg, (batch, gan.z_dim), jnp.float32)
        return z_critic, alpha, noise, z_gen

    def step(state: TrainState, real: jax.Array) -> tuple[TrainState, Metrics]:
        key = jax.random.fold_in(state.rng, state.step)
        return mapped(state, real, *draw(key))

    return jax.jit(step, donate_argnums=0)


def ema_warmup_decay(decay: float, step: jax.Array) -> jax.Array:
    """The EMA decay at (0-based) `step`: min(decay, (1 + step) / (10 + step)).

    Early on the average follows the weights closely, so a long-horizon EMA (0.999) of a short
    run is not dominated by the random initial weights it started from.
    """
    step = jnp.asarray(step, jnp.float32)
    return jnp.minimum(decay, (1.0 + step) / (10.0 + step))


def _flat(tree) -> dict[str, jax.Array]:
    """Sowed intermediates {"relu_0": (array,), ...} -> {"relu_0/0": array, ...}."""
    return {jax.tree_util.keystr(path): leaf for path, leaf in
            jax.tree_util.tree_leaves_with_path(tree)}


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
