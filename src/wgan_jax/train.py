"""The trainer: the only loop. data -> step -> records, health rules, checkpoints, evaluation.

`train_and_evaluate(config, workdir)` is importable and testable; `wgan_jax.main` is a thin
face over it. Bring your own networks (NNX, Linen or `(init, apply)`) with `generator=`
and `critic=`.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import math
import signal
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from wgan_jax import checkpoint as ckpt
from wgan_jax import evaluation, evaluators, fs, input_pipeline, plots, precision, records
from wgan_jax.config import data_shape, validate_config
from wgan_jax.data.sources import check_num_classes, num_classes
from wgan_jax.errors import StoppedDuringSetup, UserError
from wgan_jax.eval_plan import eval_plan
from wgan_jax.health import HealthMonitor, format_event
from wgan_jax.models.checks import check_run_networks
from wgan_jax.progress import Progress
from wgan_jax.runs import OBJECTS_KEY, abstract_train_state, build_gan, build_networks
from wgan_jax.state import (
    GAN,
    TrainState,
    apply_generator,
    create_train_state,
    trained_modules,
)
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_state

log = logging.getLogger("wgan_jax")

# Keys a checkpoint's data item must hold to resume from it (else it is a corrupt checkpoint).
DATA_KEYS = ("position",)


def topology_line(config: ml_collections.ConfigDict, mesh) -> str:
    """One line saying what runs where, and at which precision (the compute dtype and the
    float32 matmul precision in force, `wgan_jax.precision`)."""
    n = mesh.devices.size
    return (
        f"topology: processes={jax.process_count()} (this={jax.process_index()}) "
        f"platform={jax.devices()[0].platform} local_devices={jax.local_device_count()} "
        f"global_devices={jax.device_count()} mesh={dict(mesh.shape)} "
        f"global_batch={config.global_batch_size} per_device_batch={config.global_batch_size // n}"
        f" compute_dtype={config.compute_dtype} matmul_precision={config.matmul_precision}"
    )


# Places every leaf on all devices of `mesh` (the trainer's name for `step.place_state`).
replicate = place_state


class _Signals:
    """Installs `self._handle` for SIGTERM and SIGINT on `__enter__` (when `enabled`, from the
    main thread) and restores the previous handlers on `__exit__`."""

    enabled: bool
    _previous: dict[int, Any]

    def __enter__(self):
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except ValueError:  # not the main thread
                    pass
        return self

    def _handle(self, signum, frame) -> None:
        raise NotImplementedError

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _SetupStop(_Signals):
    """SIGTERM/SIGINT during setup (building networks, reading data, restoring, compiling):
    raises `StoppedDuringSetup`, which unwinds the setup (the lock is released, nothing
    half-written stays) and ends the run with one line saying nothing was trained yet.

    Once the loop's `_Stop` has taken over (`started`), a signal that arrives after the loop,
    while the final checkpoint and samples are written, is only logged (a second Ctrl-C still
    interrupts). Single-process runs only, as `_Stop`.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.started = False
        self._signalled = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        del frame
        if not self.started:
            raise StoppedDuringSetup(signum)
        if self._signalled and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self._signalled = True
        log.warning("received %s: the run is finishing (final checkpoint, samples)",
                    signal.Signals(signum).name)


class _Stop(_Signals):
    """Turns SIGTERM/SIGINT into a flag the loop checks between iterations.

    Only in single-process runs: with several processes a local flag would stop them at
    different steps, so there JAX's preemption service (which catches SIGTERM) and
    `Checkpointer.reached_preemption` make every process stop at the same step.
    A second Ctrl-C raises `KeyboardInterrupt` at once (exit 130): a checkpoint being
    written then may not be committed (README: the fault table).
    """

    def __init__(self, enabled: bool = True, setup: _SetupStop | None = None) -> None:
        self.requested = False
        self.enabled = enabled
        self._previous: dict[int, Any] = {}
        self._setup = setup
        if setup is not None:
            setup.started = True

    def _handle(self, signum, frame) -> None:
        del frame
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        if self._setup is not None:  # after the loop, a second Ctrl-C still interrupts
            self._setup._signalled = True
        log.warning("received %s: finishing this iteration, saving a checkpoint, exiting",
                    signal.Signals(signum).name)


class _Guard:
    """Host-side divergence guard: decides rollbacks from the logged metrics.

    The host sees metrics only at logging steps (no device-to-host sync every step, by
    design), so a run of non-finite updates or a loss explosion is noticed up to
    `log_every - 1` iterations late; the skipping itself happens inside the step
    (`optax.apply_if_finite`). The guard's bookkeeping (learning-rate scale, rollbacks so far,
    recent critic losses) is saved in every checkpoint, so a resumed run decides exactly as an
    uninterrupted one would.
    """

    HISTORY = 25  # logged critic losses behind the running median
    MIN_HISTORY = 5

    def __init__(self, config: ml_collections.ConfigDict) -> None:
        self.max_consecutive = config.max_consecutive_nonfinite
        self.explosion_factor = config.loss_explosion_factor
        self.lr_scale = 1.0
        self.rollbacks = 0
        self.losses: list[float] = []

    def state(self) -> dict[str, Any]:
        return {"lr_scale": self.lr_scale, "rollbacks": self.rollbacks,
                "losses": list(self.losses)}

    def load(self, saved: dict[str, Any]) -> None:
        guard = saved.get("guard", {})
        self.lr_scale = float(guard.get("lr_scale", saved.get("lr_scale", 1.0)))
        self.rollbacks = int(guard.get("rollbacks", 0))
        self.losses = [float(x) for x in guard.get("losses", [])]

    def check(self, row: dict[str, float]) -> tuple[str, dict[str, float]] | None:
        """(reason, evidence) when the run must roll back, else None (the loss is recorded)."""
        consecutive = row.get("nonfinite_consecutive", 0.0)
        if self.max_consecutive and consecutive >= self.max_consecutive:
            return (f"{int(consecutive)} consecutive non-finite updates were skipped",
                    {"nonfinite_consecutive": consecutive,
                     "nonfinite_skipped": row.get("nonfinite_skipped", 0.0)})
        loss = row.get("critic_loss", 0.0)
        if not math.isfinite(loss):
            return None
        if self.explosion_factor > 0 and len(self.losses) >= self.MIN_HISTORY:
            median = float(np.median(np.abs(self.losses)))
            if abs(loss) > self.explosion_factor * max(median, 1e-6):
                return (f"critic loss {loss:.4g} exploded past {self.explosion_factor:g} x its "
                        f"running median {median:.4g} (absolute values)",
                        {"critic_loss": loss, "running_median_abs": median})
        self.losses = (self.losses + [loss])[-self.HISTORY:]
        return None


def _write_config(config: ml_collections.ConfigDict, workdir: str, classes: int,
                  objects: tuple[str, ...] = ()) -> None:
    """config.json, with a conditional run's class count (`model.num_classes`) filled in and
    the networks passed as objects named (`runs.OBJECTS_KEY`: the tools ask for them)."""
    saved = json.loads(config.to_json_best_effort())
    if classes:
        saved["model"]["num_classes"] = classes
    if objects:
        saved[OBJECTS_KEY] = list(objects)
    fs.write_atomic(fs.join(workdir, "config.json"), json.dumps(saved, indent=2, sort_keys=True))


class _Sampler:
    """Fixed latents and a jitted inference-mode generator for progress pictures."""

    def __init__(self, gan: GAN, config: ml_collections.ConfigDict, reference: np.ndarray):
        self.toy = config.dataset.startswith("toy:")
        n = 1000 if self.toy else 64
        self.z = jax.random.normal(jax.random.PRNGKey(config.seed + 7), (n, gan.z_dim))
        self.reference = reference
        self.use_ema = config.ema_decay > 0
        self._gen = jax.jit(precision.within(
            config.matmul_precision,
            lambda state, z: apply_generator(gan, state, z, use_ema=self.use_ema)))

    def save(self, state: TrainState, step: int, workdir: str, writer) -> str:
        samples = np.asarray(jax.device_get(self._gen(state, self.z)), np.float32)
        path = fs.join(workdir, "samples", f"step_{step:07d}.png")
        if self.toy:
            plots.save_scatter(path, samples, self.reference, title=f"step {step}")
        else:
            plots.save_image_grid(path, np.clip(samples, -1, 1))
            writer.write_images(step, "samples", np.clip(samples, -1, 1))
        return path


@dataclasses.dataclass(frozen=True)
class Due:
    """What the loop does after an iteration besides the step itself."""

    log: bool  # a metrics row (also on the step a stop signal arrives)
    guard: bool  # the row is a regular one and feeds the divergence guard
    sample: bool
    plot: bool
    evaluate: bool
    checkpoint: bool  # a periodic checkpoint (others follow evaluations, stops and the end)


def itstime(step: int, every: int, total: int, *, last: bool = False) -> bool:
    """Whether an action run every `every` iterations (0: never) is due after `step`;
    with `last`, also after the final iteration `total`."""
    return (every > 0 and step % every == 0) or (last and step == total)


def due_actions(config: ml_collections.ConfigDict, step: int, *, stopping: bool,
                evaluating: bool, is_main: bool) -> Due:
    """The one rule deciding the loop's periodic actions after iteration `step`.

    Only regular logging rows feed the guard, so that the extra row of a stop step cannot make
    a resumed run decide differently; no evaluation starts once a stop was requested.
    """
    total = config.num_iterations
    regular_row = itstime(step, config.log_every, total, last=True)
    return Due(
        log=regular_row or stopping,
        guard=regular_row,
        sample=is_main and itstime(step, config.sample_every, total),
        plot=is_main and itstime(step, config.plot_every, total),
        evaluate=evaluating and not stopping
        and itstime(step, config.eval_every, total, last=True),
        checkpoint=itstime(step, config.checkpoint_every, total),
    )


class _Rate:
    """Iterations per second since the previous call."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self, iterations: int) -> float:
        now = time.monotonic()
        elapsed, self.last = now - self.last, now
        return iterations / elapsed if elapsed > 0 else 0.0


def _record_health(monitor: HealthMonitor, writer, step: int, row: dict[str, float]) -> None:
    for event in monitor.update({"step": step, **row}):
        writer.write_event(event)
        log.warning("health: %s", format_event(event))


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    generator: Any = None,
    critic: Any = None,
) -> dict[str, Any]:
    """Trains (resuming from `workdir`'s newest checkpoint) and returns a summary dict.

    `generator` and `critic` are your own networks (else `config.model` names them, see
    `wgan_jax.models.build_models`); yours are never modified. Those that are Flax NNX modules
    come back trained in the summary, as copies: `summary["generator"]` (with the EMA weights
    when `config.ema_decay > 0`, the ones samples and evaluations use) and
    `summary["critic"]`. `workdir` is a local directory or a URL such as
    `gs://bucket/run` (see `wgan_jax.fs`).
    """
    with _SetupStop(enabled=jax.process_count() == 1) as setup:
        mesh = make_mesh()
        validate_config(config, mesh.devices.size)
        eval_plan(config, num_classes(config))  # what evaluation cannot compute: before a write
        fs.check_directory(workdir)
        given_g, given_c = generator is not None, critic is not None
        generator, critic = build_networks(config, generator, critic)  # factory errors: no write
        is_main = jax.process_index() == 0
        check_num_classes(config)
        check_run_networks(config, generator, critic, given=(given_g, given_c))  # before a write
        it = input_pipeline.create_input_pipeline(config, mesh)  # data errors before any write
        lock = ckpt.lock_workdir(workdir)  # process 0 creates and locks it; all stop if it fails
        try:
            objects = tuple(w for w, g in (("generator", given_g), ("critic", given_c)) if g)
            return _train(config, workdir, mesh, it, generator, critic, is_main, setup, objects)
        except OSError as error:
            if not _write_error_in(workdir, error):
                raise
            # A log or picture that cannot be written (a full disk): one line, like a checkpoint.
            raise UserError(
                f"cannot write to workdir {workdir} ({type(error).__name__}: {error}"[:300]
                + "); the committed checkpoints are intact: fix the cause and run again to resume"
            ) from error
        finally:
            if lock:
                lock.release()


def _write_error_in(workdir: str, error: OSError) -> bool:
    """Whether `error` is a write into `workdir` that failed for the storage's reasons: a
    full disk or quota, a read-only file system, or permissions on a file under `workdir`."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return True
    name = str(error.filename or "")
    inside = bool(name) and fs.abspath(name).startswith(fs.abspath(workdir).rstrip("/") + "/")
    return error.errno in (errno.EACCES, errno.EPERM) and inside


def _train(config, workdir, mesh, it, generator, critic, is_main,
           setup: _SetupStop | None = None, objects: tuple[str, ...] = ()) -> dict[str, Any]:
    """The loop. Checkpoints: every `checkpoint_every`, when an evaluation ran, on a stop
    signal and at the end, asynchronously; a save waits only for the previous one.

    Resume (newest readable checkpoint) restores the state, the data position and the guard's
    bookkeeping, so an interrupted and resumed run ends bitwise equal to an uninterrupted one
    on the same machine and device count.
    """
    log.info(topology_line(config, mesh))
    shape = data_shape(config)
    ema = config.ema_decay > 0
    guard = _Guard(config)
    gan = build_gan(config, generator, critic)
    checkpointer = ckpt.Checkpointer(
        workdir, keep=config.keep_checkpoints, best_metric=config.eval.metric,
        config_json=json.loads(config.to_json_best_effort()),
    )
    restored = checkpointer.restore(abstract_train_state(gan, config, mesh),
                                    required_data=DATA_KEYS)
    start = 0
    if restored is None:
        state = replicate(create_train_state(gan, shape, config.seed, ema, check=False), mesh)
    else:
        state, saved_data, start = restored
        it.set_state(saved_data)
        guard.load(saved_data)
        if guard.lr_scale != 1.0:
            gan = build_gan(config, generator, critic, guard.lr_scale)
        log.info("resuming from checkpoint %d in %s", start, checkpointer.directory)
        if start >= config.num_iterations:
            return _already_done(config, checkpointer, start, guard, workdir)
    if restored is None and is_main:
        moved = records.set_aside_logs(workdir)
        if moved:
            log.info("no checkpoint to resume from: starting at step 0 with new logs; the "
                     "earlier logs (metrics, events, TensorBoard) were moved to %s", moved)
    if is_main:
        _write_config(config, workdir, gan.num_classes, objects)
    writer = records.MetricWriter(
        workdir, enabled=is_main, resume_step=start if restored is not None else None
    )
    for bad_step, reason in checkpointer.skipped:
        writer.write_event(records.event(
            start, "checkpoint",
            f"checkpoint {bad_step} is unreadable ({reason[:160]}); "
            + (f"resumed from {start}" if restored is not None else "started afresh"),
            "the unreadable checkpoint was moved aside as <step>.corrupt-<time>",
            skipped_step=bad_step))
    if restored is not None:
        writer.write_event(records.event(start, "resume", f"resumed from checkpoint {start}",
                                  lr_scale=guard.lr_scale, rollbacks=guard.rollbacks))
    try:
        monitor = HealthMonitor(
            dict(config.health), loss=config.loss, penalty=config.penalty,
            penalty_target=config.penalty_target, penalty_weight=config.penalty_weight,
        )
        step_fn = make_train_step(StepConfig.from_config(config, it.class_frequencies), mesh, gan)
        sampler = _Sampler(gan, config, it.reference_samples(1000, config.seed))
        evaluator = (
            evaluators.evaluator_for_data(config, it, seed=config.seed)
            if config.eval_every else None
        )
        early = evaluation.make_early_stopping(config, evaluator)
        if early is not None and restored is not None:
            early.set_state(restored[1].get("early_stopping"))
        stopped_by_early_stopping = False
        progress = Progress(start, config.num_iterations, enabled=is_main)
        total = config.num_iterations
        last_metrics: dict[str, float] = {}
        rate = _Rate()
        step = start
        stopping = False

        def data_state() -> dict[str, Any]:
            extra = {"early_stopping": early.get_state()} if early is not None else {}
            return {**it.get_state(), "lr_scale": guard.lr_scale, "guard": guard.state(), **extra}

        with _Stop(enabled=jax.process_count() == 1, setup=setup) as stop:
            while step < total:
                state, metrics = step_fn(state, next(it))
                step += 1
                progress.update(step)
                at_end = step == total
                stopping = stop.requested or checkpointer.reached_preemption(step)
                due = due_actions(config, step, stopping=stopping,
                                  evaluating=evaluator is not None, is_main=is_main)
                if due.log:
                    row = {k: float(v) for k, v in jax.device_get(metrics).items()}
                    row["steps_per_second"] = rate(config.log_every)
                    writer.write_scalars(step, row)
                    writer.write_histograms(step, records.layer_grad_norm_histograms(row))
                    last_metrics = row
                    _record_health(monitor, writer, step, row)
                    if is_main:
                        log.info("%s | critic %.4f gen %.4f W %.4f gp %.4f", progress.summary(step),
                                 row["critic_loss"], row["generator_loss"],
                                 row["wasserstein_estimate"], row["gradient_penalty"])
                    trouble = guard.check(row) if due.guard else None
                    if trouble is not None and not stopping:
                        state, gan, step = _roll_back(
                            config, mesh, checkpointer, writer, guard, it, step, trouble,
                            lambda scale: build_gan(config, generator, critic, scale),
                        )
                        step_fn = make_train_step(
                            StepConfig.from_config(config, it.class_frequencies), mesh, gan)
                        continue
                if due.sample:
                    sampler.save(state, step, workdir, writer)
                if due.plot:
                    records.update_plots(workdir)
                # An evaluation's checkpoint competes for checkpoints/best.json.
                eval_metrics: dict[str, float] | None = None
                if due.evaluate:
                    eval_metrics = evaluators.evaluate_state(
                        config, gan, state, seed=config.seed, evaluator=evaluator
                    )
                    writer.write_scalars(step, eval_metrics)
                    last_metrics.update(eval_metrics)
                    _record_health(monitor, writer, step, eval_metrics)
                    if is_main:
                        log.info("eval step %d: %s", step, " ".join(
                            f"{k}={v:.4g}" for k, v in sorted(eval_metrics.items())))
                    if early is not None and early.update(eval_metrics[evaluator.metric]):
                        log.info("early stopping: %s did not improve for %d evaluations "
                                 "(best %.4g)", evaluator.metric, early.patience, early.best)
                        stopped_by_early_stopping = True
                if at_end or stopping or stopped_by_early_stopping or eval_metrics is not None:
                    checkpointer.save(step, state, data_state(), eval_metrics)
                elif due.checkpoint:
                    if float(metrics["nonfinite_consecutive"]) > 0:
                        log.warning("step %d: updates are being skipped as non-finite; periodic "
                                    "checkpoint deferred", step)
                    else:
                        checkpointer.save(step, state, data_state())
                if stopping or stopped_by_early_stopping:
                    break
        checkpointer.wait()
        if not ckpt.all_finite(state):
            _fail_nonfinite_final(step, checkpointer, writer)
        if stopping:
            log.info("checkpoint %d committed; stopped at step %d of %d (run again to resume)",
                     checkpointer.latest_step() or 0, step, total)
        elif is_main:
            path = sampler.save(state, step, workdir, writer)
            records.update_plots(workdir)
            log.info("samples: %s", path)
        writer.close()
        checkpointer.close()
        return {"step": step, "start_step": start, "stopped_early": step < total,
                "rollbacks": guard.rollbacks, "early_stopped": stopped_by_early_stopping,
                "best": checkpointer.best(), "lr_scale": guard.lr_scale,
                "metrics": last_metrics, "workdir": workdir,
                **trained_modules(state, generator, critic, use_ema=ema)}
    except BaseException:
        # An error or a give-up: keep whatever was committed, release files and threads.
        try:
            writer.close()
        except OSError as error:  # a full disk: never mask the original error
            log.warning("closing the logs failed: %s", error)
        try:
            checkpointer.close()
        except Exception as error:  # noqa: BLE001 - never mask the original error
            log.warning("closing the checkpointer failed: %s", error)
        raise


def _already_done(config, checkpointer, start: int, guard: _Guard, workdir: str) -> dict:
    """A resume whose checkpoint already reached `num_iterations`: one line, nothing trained
    and nothing written (exit status 0: the run is complete)."""
    log.info("nothing to train: checkpoint %d in %s already reached num_iterations=%d (raise "
             "--config.num_iterations to train further)", start, checkpointer.directory,
             config.num_iterations)
    best = checkpointer.best()
    checkpointer.close()
    return {"step": start, "start_step": start, "stopped_early": False,
            "rollbacks": guard.rollbacks, "early_stopped": False, "best": best,
            "lr_scale": guard.lr_scale, "metrics": {}, "workdir": workdir}


def _fail_nonfinite_final(step: int, checkpointer, writer) -> None:
    """The run ends with a non-finite state, which is never saved: say so, name the last good
    checkpoint (an event and a `UserError`), so that the run does not end as if it succeeded."""
    last = checkpointer.latest_step()
    good = f"the last good checkpoint is {last}" if last is not None else "no checkpoint was saved"
    message = f"the state at step {step} holds non-finite values and was not saved; {good}"
    writer.write_event(records.event(
        step, "nonfinite_final", message,
        "resume from the last good checkpoint with lower learning rates or a higher "
        "penalty_weight, or check the data", last_good_checkpoint=last))
    raise UserError(message)


def _roll_back(config, mesh, checkpointer, writer, guard, it, step, trouble, make_gan):
    """Restores the newest good checkpoint with both learning rates lowered; gives up after
    `config.max_rollbacks`. Returns (state, gan, step restored)."""
    reason, evidence = trouble
    guard.rollbacks += 1
    if guard.rollbacks > config.max_rollbacks:
        writer.write_event(records.event(step, "rollback", f"gave up: {reason}", **evidence))
        raise UserError(
            f"training diverged at step {step} ({reason}) after {config.max_rollbacks} "
            "rollbacks (config.max_rollbacks); lower critic_lr/generator_lr, raise "
            "penalty_weight or check the data"
        )
    checkpointer.wait()
    restored = checkpointer.restore(abstract_train_state(make_gan(guard.lr_scale), config, mesh),
                                    required_data=DATA_KEYS)
    guard.lr_scale *= config.rollback_lr_factor
    gan = make_gan(guard.lr_scale)
    if restored is None:
        state = replicate(
            create_train_state(gan, data_shape(config), config.seed, config.ema_decay > 0,
                               check=False), mesh
        )
        it.set_state({"position": 0})
        to_step = 0
    else:
        state, saved_data, to_step = restored
        it.set_state(saved_data)
    message = (f"rolled back from step {step} to checkpoint {to_step}: {reason} "
               f"(rollback {guard.rollbacks} of at most {config.max_rollbacks})")
    writer.write_event(records.event(
        step, "rollback", message,
        f"both learning rates are now x{guard.lr_scale:g} of the configured ones",
        to_step=to_step, lr_scale=guard.lr_scale, rollbacks=guard.rollbacks, **evidence))
    log.warning("%s", message)
    return state, gan, to_step
