"""The trainer: the only loop. data -> step -> records, health rules, checkpoints, evaluation.

`train_and_evaluate(config, workdir)` is importable and testable; `wgan_jax.main` is a thin
face over it. Bring your own networks (NNX, Linen or `(init, apply)`) with `generator=`
and `critic=`.

It reads top to bottom: the checks (nothing is written before they pass), `_restore_or_init`
(the newest readable checkpoint or a fresh state), `_open_records` (config.json, the metric
writer), `_make_run` (the frozen `_Run`: GAN, compiled step, checkpointer, writer, health
monitor, guard, sampler, evaluator, early stopping), `_loop` (after each step
`policies.due_actions` decides what else happens, every checkpoint included) and `_finish`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from wgan_jax import checkpoint as ckpt
from wgan_jax import evaluators, faults, fs, input_pipeline, plots, precision, records, sampling
from wgan_jax.checkpoint_content import all_finite
from wgan_jax.config import data_shape, validate_config
from wgan_jax.data.sources import check_num_classes, num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import StoppedDuringSetup, UserError
from wgan_jax.eval_plan import EvalPlan, eval_plan
from wgan_jax.health import HealthMonitor, format_event
from wgan_jax.metrics.ranking import lower_is_better
from wgan_jax.models.checks import check_run_networks
from wgan_jax.peers import PeerLink
from wgan_jax.policies import (
    EARLY_STOP,
    STOP,
    DivergenceGuard,
    Due,
    EarlyStopping,
    Schedule,
    due_actions,
    make_early_stopping,
)
from wgan_jax.progress import Progress
from wgan_jax.runs import OBJECTS_KEY, abstract_train_state, build_gan, build_networks
from wgan_jax.state import (
    GAN,
    TrainState,
    create_train_state,
    trained_modules,
)
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_state
from wgan_jax.workdir_lock import lock_workdir

__all__ = ["train_and_evaluate"]

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
    """Fixed latents for progress pictures, drawn through `sampling.generate_from_latents`."""

    def __init__(self, gan: GAN, config: ml_collections.ConfigDict, reference: np.ndarray):
        self.toy = config.dataset.startswith("toy:")
        n = 1000 if self.toy else 64
        self.z = jax.random.normal(jax.random.PRNGKey(config.seed + 7), (n, gan.z_dim))
        self.reference = reference
        self.use_ema = config.ema_decay > 0
        self.precision = config.matmul_precision

    def save(self, gan: GAN, state: TrainState, step: int, workdir: str, writer) -> str:
        """Draws the fixed latents through `gan` (the run's current one, `sampling`'s shared
        jitted generator) and writes the picture; returns its path."""
        with precision.scope(self.precision):
            samples = sampling.generate_from_latents(gan, state, self.z, self.use_ema)
        path = fs.join(workdir, "samples", f"step_{step:07d}.png")
        if self.toy:
            plots.save_scatter(path, samples, self.reference, title=f"step {step}")
        else:
            plots.save_image_grid(path, np.clip(samples, -1, 1))
            writer.write_images(step, "samples", np.clip(samples, -1, 1))
        return path


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


@dataclasses.dataclass(frozen=True)
class _Job:
    """What the trainer was asked to do, checked before anything is written."""

    config: ml_collections.ConfigDict
    workdir: str
    mesh: jax.sharding.Mesh
    data: Any  # the data iterator; its position is saved in every checkpoint
    networks: tuple[Any, Any]  # the generator and the critic (a rollback rebuilds the GAN)
    objects: tuple[str, ...]  # the networks the caller passed as objects (config.json names them)
    pictures: bool  # sample grids and metric plots (off: the numbers are the same)
    is_main: bool  # process 0 writes the human-facing files
    schedule: Schedule  # how often the loop logs, evaluates, draws and saves (`due_actions`)
    data_spec: DataSpec  # what the data layer reads
    plan: EvalPlan  # what evaluation computes, and the metric that ranks checkpoints
    faults: faults.RunGuard  # the watchdog's phases, the newest committed checkpoint, peers


@dataclasses.dataclass(frozen=True)
class _Origin:
    """Where the loop starts: a checkpoint's state (`saved`: its data item) or a fresh one."""

    checkpointer: ckpt.Checkpointer
    gan: GAN
    guard: DivergenceGuard
    state: TrainState
    step: int
    saved: dict[str, Any] | None  # None: no checkpoint, the run starts afresh


@dataclasses.dataclass(frozen=True)
class _Run:
    """Everything the loop works with, built once before it; a rollback replaces `gan` and
    `train_step` (the optimizers' learning rates are part of the compiled step)."""

    job: _Job
    gan: GAN
    train_step: Callable[[TrainState, Any], tuple[TrainState, dict[str, jax.Array]]]
    checkpointer: ckpt.Checkpointer
    writer: records.MetricWriter
    monitor: HealthMonitor
    guard: DivergenceGuard
    sampler: _Sampler
    evaluator: evaluators.Evaluator | None
    early: EarlyStopping | None
    eval_spec: evaluators.EvalSpec | None  # what evaluation reads, built once (eval_every > 0)

    @property
    def config(self) -> ml_collections.ConfigDict:
        return self.job.config

    @property
    def metric(self) -> str:
        """The eval plan's metric: it ranks checkpoints and drives early stopping."""
        return self.job.plan.metric


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """How the loop ended."""

    run: _Run
    state: TrainState
    step: int
    stopped: bool  # by a stop signal or a preemption notice
    early_stopped: bool
    metrics: dict[str, float]  # the last logged row and evaluation


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    generator: Any = None,
    critic: Any = None,
    pictures: bool = True,
) -> dict[str, Any]:
    """Trains (resuming from `workdir`'s newest checkpoint) and returns a summary dict.

    `generator` and `critic` are your own networks (else `config.model` names them, see
    `wgan_jax.models.build_models`); yours are never modified. Those that are Flax NNX modules
    come back trained in the summary, as copies: `summary["generator"]` (with the EMA weights
    when `config.ema_decay > 0`, the ones samples and evaluations use) and
    `summary["critic"]`. `workdir` is a local directory or a URL such as
    `gs://bucket/run` (see `wgan_jax.fs`). `pictures=False` skips the sample grids and the
    metric plots (also the final ones), e.g. in tests: every number stays the same.

    Faults (`wgan_jax.faults`, `config.faults`): a restore, an iteration or a save that runs
    far past its bound ends the process (the watchdog: every thread's stack in
    `WORKDIR/faults/`, one line, exit status `cli.EXIT_HUNG`). With several processes, any
    error ends this process in one line (`faults.RunGuard.fail`: a lost peer, a user error
    with the same line on every process, anything else) instead of raising: a process that
    left the run could not rejoin the others, which would wait for it in a collective.
    """
    with _SetupStop(enabled=jax.process_count() == 1) as setup:
        mesh = make_mesh()
        validate_config(config, mesh.devices.size)
        with _run_guard(config, workdir) as guard:
            try:
                return _check_and_train(config, workdir, mesh, (generator, critic), pictures,
                                        setup, guard)
            except BaseException as error:
                if jax.process_count() > 1:
                    guard.fail(error)  # ends this process (a SystemExit goes on)
                raise


def _run_guard(config: ml_collections.ConfigDict, workdir: str) -> faults.RunGuard:
    """The run's fault handling: the watchdog and, with several processes, the link to the
    others."""
    return faults.RunGuard(workdir, faults.WatchdogBounds.from_config(config),
                           process=jax.process_index(), count=jax.process_count(),
                           peers=PeerLink.connect(), checkpoints=fs.join(workdir, "checkpoints"))


def _check_and_train(config: ml_collections.ConfigDict, workdir: str, mesh: jax.sharding.Mesh,
                     networks: tuple[Any, Any], pictures: bool, setup: _SetupStop,
                     guard: faults.RunGuard) -> dict[str, Any]:
    """The checks (nothing is written before they pass), the workdir lock, `_train`."""
    data_spec = DataSpec.from_config(config)  # what the data layer reads, once
    plan = eval_plan(config, num_classes(data_spec))  # impossible evaluation: before a write
    fs.check_directory(workdir)
    given_g, given_c = networks[0] is not None, networks[1] is not None
    generator, critic = build_networks(config, *networks)  # factory errors: no write
    check_num_classes(data_spec)
    check_run_networks(config, generator, critic, given=(given_g, given_c))  # before a write
    it = input_pipeline.create_input_pipeline(data_spec, mesh)  # data errors before any write
    objects = tuple(w for w, g in (("generator", given_g), ("critic", given_c)) if g)
    job = _Job(config, workdir, mesh, it, (generator, critic), objects, pictures,
               is_main=jax.process_index() == 0, schedule=Schedule.from_config(config),
               data_spec=data_spec, plan=plan, faults=guard)
    lock = lock_workdir(workdir)  # process 0 creates and locks it; all stop if it fails
    try:
        return _train(job, setup)
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


def _train(job: _Job, setup: _SetupStop) -> dict[str, Any]:
    """Restore or init, the loop, finish. Checkpoints: every `checkpoint_every`, when an
    evaluation ran, on a stop signal, an early stop and at the end (`policies.due_actions`),
    asynchronously; a save waits only for the previous one.

    Resume (newest readable checkpoint) restores the state, the data position and the guard's
    bookkeeping, so an interrupted and resumed run ends bitwise equal to an uninterrupted one
    on the same machine and device count.
    """
    log.info(topology_line(job.config, job.mesh))
    origin = _restore_or_init(job)
    if origin.saved is not None and origin.step >= job.config.num_iterations:
        return _already_done(job, origin)
    writer = _open_records(job, origin)
    with _closed_on_error(writer, origin.checkpointer):
        run = _make_run(job, origin, writer)
        return _finish(_loop(run, origin.state, origin.step, setup), origin.step)


def _fresh_state(config: ml_collections.ConfigDict, gan: GAN, mesh) -> TrainState:
    """A new train state from `config.seed`, on every device of `mesh`."""
    state = create_train_state(gan, data_shape(config), config.seed, config.ema_decay > 0,
                               check=False)
    return replicate(state, mesh)


def _restore_or_init(job: _Job) -> _Origin:
    """The newest readable checkpoint in the workdir (with the data position and the guard's
    bookkeeping it holds), else a fresh state."""
    config = job.config
    guard = DivergenceGuard(config.max_consecutive_nonfinite, config.loss_explosion_factor)
    gan = build_gan(config, *job.networks)
    checkpointer = ckpt.Checkpointer(
        job.workdir, keep=config.keep_checkpoints, best_metric=job.plan.metric,
        config_json=json.loads(config.to_json_best_effort()),
        on_background_failure=job.faults.write_failed if jax.process_count() > 1 else None,
    )
    with job.faults.phase("restoring a checkpoint"):
        restored = checkpointer.restore(abstract_train_state(gan, config, job.mesh),
                                        required_data=DATA_KEYS)
    job.faults.committed(checkpointer.committed_step)
    if restored is None:
        return _Origin(checkpointer, gan, guard, _fresh_state(config, gan, job.mesh), 0, None)
    state, saved, start = restored
    job.data.set_state(saved)
    guard.load(saved)
    if guard.lr_scale != 1.0:
        gan = build_gan(config, *job.networks, guard.lr_scale)
    log.info("resuming from checkpoint %d in %s", start, checkpointer.directory)
    return _Origin(checkpointer, gan, guard, state, start, saved)


def _open_records(job: _Job, origin: _Origin) -> records.MetricWriter:
    """Sets earlier logs aside (a fresh start), writes config.json and opens the metric
    writer, with an event for every unreadable checkpoint skipped and one for the resume."""
    resumed = origin.saved is not None
    if not resumed and job.is_main:
        moved = records.set_aside_logs(job.workdir)
        if moved:
            log.info("no checkpoint to resume from: starting at step 0 with new logs; the "
                     "earlier logs (metrics, events, TensorBoard) were moved to %s", moved)
    if job.is_main:
        _write_config(job.config, job.workdir, origin.gan.num_classes, job.objects)
    writer = records.MetricWriter(job.workdir, enabled=job.is_main,
                                  resume_step=origin.step if resumed else None)
    for bad_step, reason in origin.checkpointer.skipped:
        writer.write_event(records.event(
            origin.step, "checkpoint",
            f"checkpoint {bad_step} is unreadable ({reason[:160]}); "
            + (f"resumed from {origin.step}" if resumed else "started afresh"),
            "the unreadable checkpoint was moved aside as <step>.corrupt-<time>",
            skipped_step=bad_step))
    if resumed:
        writer.write_event(records.event(
            origin.step, "resume", f"resumed from checkpoint {origin.step}",
            lr_scale=origin.guard.lr_scale, rollbacks=origin.guard.rollbacks))
    return writer


@contextlib.contextmanager
def _closed_on_error(writer: records.MetricWriter, checkpointer: ckpt.Checkpointer):
    """On an error or a give-up: keeps whatever was committed, releases files and threads,
    and raises the original error."""
    try:
        yield
    except BaseException:
        try:
            writer.close()
        except OSError as error:  # a full disk: never mask the original error
            log.warning("closing the logs failed: %s", error)
        if jax.process_count() > 1:
            # Waiting for an unfinished save could wait for a lost peer in orbax's barriers;
            # the process ends next (`faults.RunGuard.fail`) and keeps what was committed.
            raise
        try:
            checkpointer.close()
        except Exception as error:  # noqa: BLE001 - never mask the original error
            log.warning("closing the checkpointer failed: %s", error)
        raise


def _make_step(job: _Job, gan: GAN) -> Callable:
    """The compiled training step of `gan` (its optimizers' learning rates included)."""
    return make_train_step(StepConfig.from_config(job.config, job.data.class_frequencies),
                           job.mesh, gan)


def _make_run(job: _Job, origin: _Origin, writer: records.MetricWriter) -> _Run:
    """The health rules, the step, the sampler, the evaluator and early stopping (restored
    from the checkpoint's data item on a resume)."""
    config = job.config
    monitor = HealthMonitor(
        dict(config.health), loss=config.loss, penalty=config.penalty,
        penalty_target=config.penalty_target, penalty_weight=config.penalty_weight,
    )
    train_step = _make_step(job, origin.gan)
    sampler = _Sampler(origin.gan, config, job.data.reference_samples(1000, config.seed))
    eval_spec = (evaluators.EvalSpec.from_config(config, job.data_spec, job.plan)
                 if config.eval_every else None)
    evaluator = (evaluators.evaluator_for_data(eval_spec, job.data, seed=config.seed)
                 if eval_spec is not None else None)
    if evaluator is not None and origin.checkpointer.best() is None:  # a resume keeps its own
        log.info("best checkpoint chosen by %s (%s is better)", job.plan.metric,
                 "lower" if lower_is_better(job.plan.metric) else "higher")
    early = make_early_stopping(job.plan.metric if evaluator is not None else "",
                                patience=config.early_stopping.patience,
                                eval_every=config.eval_every)
    if early is not None and origin.saved is not None:
        early.set_state(origin.saved.get("early_stopping"))
    return _Run(job, origin.gan, train_step, origin.checkpointer, writer, monitor, origin.guard,
                sampler, evaluator, early, eval_spec)


def _loop(run: _Run, state: TrainState, start: int, setup: _SetupStop) -> _Outcome:
    """Steps until `num_iterations`, a stop signal or an early stop; after each step
    `due_actions` decides what else happens (log, guard, pictures, evaluation, checkpoint)."""
    config, total = run.config, run.config.num_iterations
    progress = Progress(start, total, enabled=run.job.is_main)
    rate = _Rate()
    last_metrics: dict[str, float] = {}
    step = start
    due = None
    watch = run.job.faults
    compiled = False  # the first iteration of a (re)built step compiles it: not watched
    with _Stop(enabled=jax.process_count() == 1, setup=setup) as stop:
        while step < total:
            with watch.phase(f"step {step + 1}", step=step + 1, iteration=True,
                             watched=compiled):
                state, metrics = run.train_step(state, next(run.job.data))
                step += 1
                progress.update(step)
                stopping = stop.requested or run.checkpointer.reached_preemption(step)
                due = due_actions(run.job.schedule, step, stopping=stopping,
                                  evaluating=run.evaluator is not None, is_main=run.job.is_main)
                trouble = None
                if due.log:
                    last_metrics = _log_row(run, step, metrics, rate(config.log_every), progress)
                    trouble = run.guard.check(last_metrics) if due.guard else None
                compiled = True
            if trouble is not None and not stopping:
                with watch.phase(f"rolling back from step {step}"):
                    run, state, step = _roll_back(run, step, trouble)
                compiled = False
                continue
            with watch.phase(f"drawing samples at step {step}"):
                _draw(run, state, step, due)
            with watch.phase(f"evaluating at step {step}", watched=False):
                eval_metrics = _evaluate_and_log(run, state, step) if due.evaluate else None
            if eval_metrics is not None:
                last_metrics.update(eval_metrics)
                if _early_stop(run, eval_metrics):
                    due = due_actions(run.job.schedule, step, stopping=stopping, evaluating=True,
                                      is_main=run.job.is_main, early_stop=True)
            _save_checkpoint(run, state, step, due, metrics, eval_metrics)
            if due.stop:
                break
    return _Outcome(run, state, step, stopped=due is not None and due.checkpoint == STOP,
                    early_stopped=due is not None and due.checkpoint == EARLY_STOP,
                    metrics=last_metrics)


def _log_row(run: _Run, step: int, metrics: dict[str, jax.Array], steps_per_second: float,
             progress: Progress) -> dict[str, float]:
    """Writes the step's metrics row (and its layer histograms), runs the health rules on it
    and logs one line; returns the row."""
    row = {k: float(v) for k, v in jax.device_get(metrics).items()}
    row["steps_per_second"] = steps_per_second
    run.writer.write_scalars(step, row)
    run.writer.write_histograms(step, records.layer_grad_norm_histograms(row))
    _record_health(run.monitor, run.writer, step, row)
    if run.job.is_main:
        log.info("%s | critic %.4f gen %.4f W %.4f gp %.4f", progress.summary(step),
                 row["critic_loss"], row["generator_loss"], row["wasserstein_estimate"],
                 row["gradient_penalty"])
    return row


def _draw(run: _Run, state: TrainState, step: int, due: Due) -> None:
    """The progress pictures due after `step`: a sample grid, the metric plots."""
    if not run.job.pictures:
        return
    if due.sample:
        run.sampler.save(run.gan, state, step, run.job.workdir, run.writer)
    if due.plot:
        records.update_plots(run.job.workdir)


def _evaluate_and_log(run: _Run, state: TrainState, step: int) -> dict[str, float]:
    """Evaluates `state`, writes the metrics and runs the health rules on them."""
    eval_metrics = evaluators.evaluate_state(run.eval_spec, run.gan, state,  # type: ignore[arg-type]
                                             seed=run.config.seed,
                                             evaluator=run.evaluator)
    run.writer.write_scalars(step, eval_metrics)
    _record_health(run.monitor, run.writer, step, eval_metrics)
    if run.job.is_main:
        log.info("eval step %d: %s", step, " ".join(
            f"{k}={v:.4g}" for k, v in sorted(eval_metrics.items())))
    return eval_metrics


def _early_stop(run: _Run, eval_metrics: dict[str, float]) -> bool:
    """Feeds an evaluation to early stopping; True (and one line) when the run must stop."""
    if run.early is None or not run.early.update(eval_metrics[run.metric]):
        return False
    log.info("early stopping: %s did not improve for %d evaluations (best %.4g)", run.metric,
             run.early.patience, run.early.best)
    return True


def _data_state(run: _Run) -> dict[str, Any]:
    """The checkpoint's data item: the data position, the guard's and early stopping's
    bookkeeping."""
    extra = {"early_stopping": run.early.get_state()} if run.early is not None else {}
    return {**run.job.data.get_state(), "lr_scale": run.guard.lr_scale,
            "guard": run.guard.state(), **extra}


def _save_checkpoint(run: _Run, state: TrainState, step: int, due: Due,
                     metrics: dict[str, jax.Array], eval_metrics: dict[str, float] | None) -> None:
    """Starts the checkpoint `due` asks for; an evaluation's metrics compete for
    checkpoints/best.json. A periodic one waits while updates are skipped as non-finite."""
    if not due.checkpoint:
        return
    if due.deferrable and float(metrics["nonfinite_consecutive"]) > 0:
        log.warning("step %d: updates are being skipped as non-finite; periodic checkpoint "
                    "deferred", step)
        return
    with run.job.faults.phase(f"saving checkpoint {step}"):
        run.checkpointer.save(step, state, _data_state(run), eval_metrics)
    run.job.faults.committed(run.checkpointer.committed_step)  # the save waited for the last


def _finish(outcome: _Outcome, start: int) -> dict[str, Any]:
    """Waits for the last checkpoint, refuses a non-finite final state, draws the final
    pictures (unless stopped), closes the records and returns the summary."""
    run, state, step = outcome.run, outcome.state, outcome.step
    job, checkpointer = run.job, run.checkpointer
    with job.faults.phase("finishing: waiting for the last checkpoint"):
        checkpointer.wait()
    job.faults.committed(checkpointer.committed_step)
    if not all_finite(state):
        _fail_nonfinite_final(step, checkpointer, run.writer)
    if outcome.stopped:
        log.info("checkpoint %d committed; stopped at step %d of %d (run again to resume)",
                 checkpointer.latest_step() or 0, step, run.config.num_iterations)
    elif job.is_main and job.pictures:
        path = run.sampler.save(run.gan, state, step, job.workdir, run.writer)
        records.update_plots(job.workdir)
        log.info("samples: %s", path)
    run.writer.close()
    checkpointer.close()
    return {"step": step, "start_step": start, "stopped_early": step < run.config.num_iterations,
            "rollbacks": run.guard.rollbacks, "early_stopped": outcome.early_stopped,
            "best": checkpointer.best(), "lr_scale": run.guard.lr_scale,
            "metrics": outcome.metrics, "workdir": job.workdir,
            **trained_modules(state, *job.networks, use_ema=run.config.ema_decay > 0)}


def _already_done(job: _Job, origin: _Origin) -> dict[str, Any]:
    """A resume whose checkpoint already reached `num_iterations`: one line, nothing trained
    and nothing written (exit status 0: the run is complete)."""
    checkpointer = origin.checkpointer
    log.info("nothing to train: checkpoint %d in %s already reached num_iterations=%d (raise "
             "--config.num_iterations to train further)", origin.step, checkpointer.directory,
             job.config.num_iterations)
    best = checkpointer.best()
    checkpointer.close()
    return {"step": origin.step, "start_step": origin.step, "stopped_early": False,
            "rollbacks": origin.guard.rollbacks, "early_stopped": False, "best": best,
            "lr_scale": origin.guard.lr_scale, "metrics": {}, "workdir": job.workdir}


def _fail_nonfinite_final(step: int, checkpointer: ckpt.Checkpointer,
                          writer: records.MetricWriter) -> None:
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


def _roll_back(run: _Run, step: int,
               trouble: tuple[str, dict[str, float]]) -> tuple[_Run, TrainState, int]:
    """Restores the newest good checkpoint with both learning rates lowered; gives up after
    `config.max_rollbacks`. Returns the run with its new GAN and step, the state and the step
    restored."""
    config, guard, job = run.config, run.guard, run.job
    reason, evidence = trouble
    guard.rollbacks += 1
    if guard.rollbacks > config.max_rollbacks:
        run.writer.write_event(records.event(step, "rollback", f"gave up: {reason}",
                                             **evidence))  # type: ignore[arg-type]
        raise UserError(
            f"training diverged at step {step} ({reason}) after {config.max_rollbacks} "
            "rollbacks (config.max_rollbacks); lower critic_lr/generator_lr, raise "
            "penalty_weight or check the data"
        )
    run.checkpointer.wait()
    restored = run.checkpointer.restore(abstract_train_state(run.gan, config, job.mesh),
                                        required_data=DATA_KEYS)
    guard.lr_scale *= config.rollback_lr_factor
    gan = build_gan(config, *job.networks, guard.lr_scale)
    if restored is None:
        state, to_step = _fresh_state(config, gan, job.mesh), 0
        job.data.set_state({"position": 0})
    else:
        state, saved, to_step = restored
        job.data.set_state(saved)
    message = (f"rolled back from step {step} to checkpoint {to_step}: {reason} "
               f"(rollback {guard.rollbacks} of at most {config.max_rollbacks})")
    run.writer.write_event(records.event(
        step, "rollback", message,
        f"both learning rates are now x{guard.lr_scale:g} of the configured ones",
        to_step=to_step, lr_scale=guard.lr_scale, rollbacks=guard.rollbacks, **evidence))
    log.warning("%s", message)
    return dataclasses.replace(run, gan=gan, train_step=_make_step(job, gan)), state, to_step
