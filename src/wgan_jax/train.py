"""The trainer: the only loop. data -> step -> writers, health rules, checkpoints, evaluation.

`train_and_evaluate(config, workdir)` is importable and testable; `wgan_jax.main` is a thin
face over it. Bring your own Flax modules with `generator=` and `critic=`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import checkpoint as ckpt
from wgan_jax import input_pipeline, writers
from wgan_jax.config import data_shape, validate_config
from wgan_jax.errors import UserError
from wgan_jax.health import HealthMonitor
from wgan_jax.models import build_models
from wgan_jax.progress import Progress
from wgan_jax.state import GAN, TrainState, create_train_state, generate, make_optimizers
from wgan_jax.step import make_mesh, make_train_step

log = logging.getLogger("wgan_jax")


def topology_line(config: ml_collections.ConfigDict, mesh) -> str:
    """One line saying what runs where."""
    n = mesh.devices.size
    return (
        f"topology: processes={jax.process_count()} (this={jax.process_index()}) "
        f"platform={jax.devices()[0].platform} local_devices={jax.local_device_count()} "
        f"global_devices={jax.device_count()} mesh={dict(mesh.shape)} "
        f"global_batch={config.global_batch_size} per_device_batch={config.global_batch_size // n}"
    )


def build_gan(
    config: ml_collections.ConfigDict,
    generator: nn.Module | None = None,
    critic: nn.Module | None = None,
    lr_scale: float = 1.0,
) -> GAN:
    """The modules (the config's, or the caller's own) and their optimizers."""
    default_g, default_c = build_models(config)
    g_tx, d_tx = make_optimizers(config, lr_scale)
    return GAN(generator or default_g, critic or default_c, g_tx, d_tx, config.model.z_dim)


def replicate(tree: Any, mesh) -> Any:
    """Places every leaf on all devices of `mesh` (parameters are replicated)."""
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: jax.device_put(x, sharding), tree)


def abstract_state(state: TrainState, mesh) -> Any:
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves))


class _Stop:
    """Turns SIGTERM/SIGINT into a flag the loop checks between iterations."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame) -> None:
        del frame
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("received %s: finishing this iteration, saving a checkpoint, exiting",
                    signal.Signals(signum).name)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _write_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    path = os.path.join(workdir, "config.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(config.to_json_best_effort(indent=2, sort_keys=True))
    os.replace(tmp, path)


class _Sampler:
    """Fixed latents and a jitted inference-mode generator for progress pictures."""

    def __init__(self, gan: GAN, config: ml_collections.ConfigDict, reference: np.ndarray):
        self.toy = config.dataset.startswith("toy:")
        n = 1000 if self.toy else 64
        self.z = jax.random.normal(jax.random.PRNGKey(config.seed + 7), (n, gan.z_dim))
        self.reference = reference
        self.use_ema = config.ema_decay > 0
        self._gen = jax.jit(lambda state, z: generate(gan, state, z, use_ema=self.use_ema))

    def save(self, state: TrainState, step: int, workdir: str, writer) -> str:
        samples = np.asarray(jax.device_get(self._gen(state, self.z)), np.float32)
        path = os.path.join(workdir, "samples", f"step_{step:07d}.png")
        if self.toy:
            writers.save_scatter(path, samples, self.reference, title=f"step {step}")
        else:
            writers.save_image_grid(path, np.clip(samples, -1, 1))
            writer.write_images(step, "samples", np.clip(samples, -1, 1))
        return path


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    generator: nn.Module | None = None,
    critic: nn.Module | None = None,
) -> dict[str, Any]:
    """Trains (resuming from `workdir`'s newest checkpoint) and returns a summary dict."""
    mesh = make_mesh()
    validate_config(config, mesh.devices.size)
    is_main = jax.process_index() == 0
    local_workdir = "://" not in workdir
    lock = ckpt.WorkdirLock(workdir) if local_workdir and is_main else None
    it = input_pipeline.create_input_pipeline(config, mesh)  # data errors before any write
    if is_main and local_workdir:
        os.makedirs(workdir, exist_ok=True)
    if lock:
        lock.acquire()
    try:
        return _train(config, workdir, mesh, it, generator, critic, is_main)
    finally:
        if lock:
            lock.release()


def _train(config, workdir, mesh, it, generator, critic, is_main) -> dict[str, Any]:
    log.info(topology_line(config, mesh))
    shape = data_shape(config)
    lr_scale = 1.0
    gan = build_gan(config, generator, critic, lr_scale)
    state = replicate(create_train_state(gan, shape, config.seed, config.ema_decay > 0), mesh)
    checkpointer = ckpt.Checkpointer(
        workdir, keep=config.keep_checkpoints, best_metric=config.eval.metric
    )
    restored = checkpointer.restore(abstract_state(state, mesh))
    start = 0
    if restored is not None:
        state, data_state, start = restored
        it.set_state(data_state)
        lr_scale = float(data_state.get("lr_scale", 1.0))
        if lr_scale != 1.0:
            gan = build_gan(config, generator, critic, lr_scale)
        log.info("resuming from checkpoint %d in %s", start, checkpointer.directory)
    if is_main:
        _write_config(config, workdir)
    writer = writers.MetricWriter(
        workdir, enabled=is_main, resume_step=start if restored is not None else None
    )
    monitor = HealthMonitor(dict(config.health), loss=config.loss, penalty=config.penalty)
    step_fn = make_train_step(config, mesh, gan, shape)
    sampler = _Sampler(gan, config, it.reference_samples(1000, config.seed))
    progress = Progress(start, config.num_iterations, enabled=is_main)
    total = config.num_iterations
    rollbacks = 0
    last_metrics: dict[str, float] = {}
    t_log = time.monotonic()
    step = start

    def data_state() -> dict[str, Any]:
        return {**it.get_state(), "lr_scale": lr_scale}

    with _Stop() as stop:
        while step < total:
            state, metrics = step_fn(state, next(it))
            step += 1
            progress.update(step)
            at_end = step == total
            if step % config.log_every == 0 or at_end or stop.requested:
                row = {k: float(v) for k, v in jax.device_get(metrics).items()}
                elapsed = time.monotonic() - t_log
                t_log = time.monotonic()
                row["steps_per_second"] = config.log_every / elapsed if elapsed > 0 else 0.0
                writer.write_scalars(step, row)
                last_metrics = row
                for event in monitor.update({"step": step, **row}):
                    writer.write_event(event)
                    log.warning("health: step %d %s: %s", step, event["rule"], event["message"])
                if is_main:
                    log.info("%s | critic %.4f gen %.4f W %.4f gp %.4f", progress.summary(step),
                             row["critic_loss"], row["generator_loss"],
                             row["wasserstein_estimate"], row["gradient_penalty"])
                if _needs_rollback(row, config):
                    rollbacks += 1
                    if rollbacks > config.max_rollbacks:
                        raise UserError(
                            f"training diverged {rollbacks} times (non-finite updates); gave up "
                            f"after config.max_rollbacks={config.max_rollbacks}. Lower "
                            "critic_lr/generator_lr or raise penalty_weight."
                        )
                    checkpointer.wait()
                    restored = checkpointer.restore(abstract_state(state, mesh))
                    lr_scale *= config.rollback_lr_factor
                    gan = build_gan(config, generator, critic, lr_scale)
                    step_fn = make_train_step(config, mesh, gan, shape)
                    if restored is None:
                        state = replicate(
                            create_train_state(gan, shape, config.seed, config.ema_decay > 0), mesh
                        )
                        it.set_state({"position": 0})
                        to_step = 0
                    else:
                        state, dstate, to_step = restored
                        it.set_state(dstate)
                    event = {
                        "step": step, "rule": "rollback",
                        "message": f"rolled back from step {step} to checkpoint {to_step} after "
                                   "non-finite updates",
                        "advice": f"learning rates now x{lr_scale:g} of the configured ones",
                        "evidence": {"nonfinite_consecutive": row.get("nonfinite_consecutive"),
                                     "lr_scale": lr_scale},
                    }
                    writer.write_event(event)
                    log.warning("%s", event["message"])
                    step = to_step
                    continue
            if config.sample_every and (step % config.sample_every == 0) and is_main:
                sampler.save(state, step, workdir, writer)
            if is_main and config.plot_every and step % config.plot_every == 0:
                writers.update_plots(workdir)
            save_now = at_end or stop.requested or (
                config.checkpoint_every and step % config.checkpoint_every == 0
            )
            if save_now:
                if bool(_all_finite(state)):
                    checkpointer.save(step, state, data_state())
                else:
                    log.warning("state at step %d is not finite; checkpoint skipped", step)
            if stop.requested:
                break
    checkpointer.wait()
    if is_main:
        path = sampler.save(state, step, workdir, writer)
        writers.update_plots(workdir)
        log.info("samples: %s", path)
    writer.close()
    checkpointer.close()
    return {"step": step, "stopped_early": step < total, "metrics": last_metrics,
            "workdir": workdir}


def _needs_rollback(row: dict[str, float], config: ml_collections.ConfigDict) -> bool:
    consecutive = row.get("nonfinite_consecutive", 0.0)
    if consecutive >= config.max_consecutive_nonfinite:
        return True
    loss = row.get("critic_loss", 0.0)
    return not math.isfinite(loss) and consecutive > 0


def load_config_json(workdir: str) -> ml_collections.ConfigDict:
    """The config a run in `workdir` was trained with, over today's defaults."""
    from wgan_jax.config import get_default_config

    path = os.path.join(workdir, "config.json")
    try:
        with open(path) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path} not found: is {workdir!r} a wgan_jax workdir?") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"{path} cannot be read: {error}") from None
    config = get_default_config()
    _update(config, saved)
    return config


def _update(config: ml_collections.ConfigDict, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if key not in config:
            continue
        if isinstance(config[key], ml_collections.ConfigDict):
            _update(config[key], value)
        else:
            config[key] = type(config[key])(value) if config[key] is not None else value
