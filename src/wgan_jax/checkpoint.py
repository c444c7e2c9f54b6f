"""Checkpoints with orbax: async saves, newest-N plus best retention, fallback on corruption.

A checkpoint (`WORKDIR/checkpoints/<step>/`) holds three items: `state` (the whole
`TrainState`: both networks, BatchNorm statistics, both optimizer states, the EMA generator,
the step and the base RNG key), `data` (the data iterator's position and the trainer's guard
bookkeeping, JSON) and `config` (the run's config, JSON). A resumed run therefore continues
bit for bit.

Retention uses orbax preservation policies, *latest N or best 1*, never `best_fn` with
`max_to_keep` (that combination can delete the newest checkpoint). Orbax deletes old steps only
after a newer one is committed, so the last good checkpoint always survives a crash.

`Checkpointer` orchestrates save, restore, wait and close; the rooms it draws on:

- `checkpoint_best`: the best-checkpoint record (`best.json`: read, write, rank, carry-over).
  Evaluation feeds it by passing its metrics to `Checkpointer.save(..., metrics=)`;
  `best_metric` is the key that ranks them, chosen once by the caller (the trainer hands over
  the eval plan's `EvalPlan.metric`).
- `checkpoint_content`: fingerprints of the state and of the data item, finiteness, shape
  checks, reading one checkpoint on this process alone and placing it on the mesh.
- `checkpoint_agreement`: with several processes every decision that could part them is taken
  together (the step list, each candidate's outcome, retries, moving a step aside, a save's
  folder check); I/O errors are told from bad content there.
- `workdir_lock`: one trainer per workdir.

WORKDIR may be a URL (`gs://bucket/run`): the checkpoint directory is then handed to orbax as
is, our own files go through `wgan_jax.fs`, and the workdir lock is skipped.

Nothing is lost to a fault: a checkpoint is set aside only when its content fails to parse or
to match (`CheckpointContentError`); a read that fails with an I/O error is retried and then
stops the run in one line (`UserError`) without setting anything aside, and a write that
fails (disk full) stops the run in one line with the committed checkpoints intact. A
checkpoint that cannot be moved aside is never deleted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as cm

from wgan_jax import fs
from wgan_jax.checkpoint_agreement import (
    agree_on_steps,
    any_process,
    check_writable,
    create_directory,
    is_io_error,
    move_aside,
    on_process,
    read_agreed,
    reason,
)
from wgan_jax.checkpoint_best import BestRecord, write_best_file
from wgan_jax.checkpoint_content import all_finite, data_item, place, read_local
from wgan_jax.errors import UserError

__all__ = ["Checkpointer"]

log = logging.getLogger("wgan_jax")


def _not_a_read_only_note(record: logging.LogRecord) -> bool:
    """False for orbax's notes that a manager opened read-only is read-only."""
    return not ("orbax" in record.pathname and "read only" in record.getMessage().replace("_", " "))


@contextlib.contextmanager
def _read_only_notes_quiet(read_only: bool) -> Iterator[None]:
    """Orbax logs two warnings (through absl) whenever a checkpoint directory is opened
    read-only, which is what `load_run`, `sample` and `evaluate` ask for: a filter on the absl
    logger drops just those while the manager is made, and is removed after (the caller's
    logging configuration is left as it was)."""
    if not read_only:
        yield
        return
    logger = logging.getLogger("absl")
    logger.addFilter(_not_a_read_only_note)
    try:
        yield
    finally:
        logger.removeFilter(_not_a_read_only_note)


class Checkpointer:
    """Saves and restores `(state, data_state)` under `WORKDIR/checkpoints/`.

    `best_metric` is the `eval/...` key whose values (`save(..., metrics=)`) rank checkpoints
    for the best-checkpoint policy and best.json ("": none ranks them; a bare NAME means
    `eval/NAME`).

    `read_only=True` is for tools (sampling, evaluation) that read a workdir a trainer may be
    writing: it never cleans temporary directories, deletes or renames anything.

    `on_background_failure(line)`: with several processes, called (from orbax's writer
    thread) with the one-line error when an asynchronous save fails on this process. It must
    end the run on every process (`faults.RunGuard.write_failed`): the other processes would
    wait for this one in orbax's barriers, and this one in theirs, without a word.
    """

    def __init__(
        self,
        workdir: str,
        *,
        keep: int = 3,
        best_metric: str = "",
        read_only: bool = False,
        config_json: dict[str, Any] | None = None,
        on_background_failure: Callable[[str], Any] | None = None,
    ) -> None:
        self.directory = fs.abspath(fs.join(workdir, "checkpoints"))
        self.read_only = read_only
        self._config_json = config_json
        self._in_flight: int | None = None  # the step whose asynchronous save may be running
        self.committed_step: int | None = None  # the newest step this process knows committed
        self._observer: _BackgroundFailures | None = None
        if on_background_failure is not None and not read_only:
            self._observer = _BackgroundFailures(
                lambda error: on_background_failure(self._write_error_line(
                    self._in_flight, error, local=True)))
            self._observer.install()
        self.skipped: list[tuple[int, str]] = []  # unreadable checkpoints met by restore()
        self._best = BestRecord(fs.join(self.directory, "best.json"), best_metric)
        if not read_only:
            create_directory(self.directory)
        with _read_only_notes_quiet(read_only):
            self.manager = ocp.CheckpointManager(self.directory,
                                                 options=self._options(keep, read_only))

    def _options(self, keep: int, read_only: bool) -> ocp.CheckpointManagerOptions:
        """Orbax's options: keep the newest `keep` or the best (none of that when read-only)."""
        policy = cm.AnyPreservationPolicy([
            cm.LatestN(n=keep),
            # Scores are "lower is better"; BestN keeps the last n after a descending sort.
            cm.BestN(get_metric_fn=self._best.score, reverse=True, n=1,
                     keep_checkpoints_without_metrics=False),
        ])
        return ocp.CheckpointManagerOptions(
            preservation_policy=None if read_only else policy,
            best_fn=self._best.score,  # makes orbax store each step's metrics for BestN
            best_mode="min",
            enable_async_checkpointing=not read_only,
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            read_only=read_only,
        )

    # ---- the best checkpoint -------------------------------------------------------------

    @property
    def best_metric(self) -> str:
        """The metric that ranks checkpoints ("" if none does)."""
        return self._best.metric

    def _write_pending_best(self) -> None:
        """Records the pending best step in best.json once its checkpoint is committed."""
        record = self._best.take_committed(self.manager.all_steps)
        if record is None or jax.process_index() != 0 or self.read_only:
            return
        write_best_file(self._best.path, record)

    def best(self) -> dict[str, Any] | None:
        """`{"step", "metric", "value"}` of the best kept checkpoint, or None before any eval.

        Read from best.json; if that step is gone (or the file is missing), recomputed from the
        metrics orbax stored beside each checkpoint.
        """
        return self._best.best(self.all_steps, self.manager.metrics)

    # ---- steps, save, restore ------------------------------------------------------------

    def all_steps(self) -> list[int]:
        """The steps of the committed checkpoints, oldest first."""
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest committed checkpoint's step, or None."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(
        self,
        step: int,
        state: Any,
        data_state: dict[str, Any],
        metrics: dict[str, float] | None = None,
    ) -> bool:
        """Starts an asynchronous save of `step`; returns whether a save was started.

        `metrics` (e.g. `{"eval/fid": 12.3}` when an evaluation ran at this step) feed the
        best-checkpoint policy. A state with a non-finite value is never saved (logged instead),
        and a step that already has a checkpoint is left alone.
        """
        if self.read_only:
            raise UserError(f"{self.directory} was opened read-only")
        if any_process(step in self.manager.all_steps()):
            return False
        if not all_finite(state):
            log.warning("state at step %d has non-finite values; checkpoint not saved", step)
            return False
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        self._best.adopt_new_name(metrics)
        items: dict[str, Any] = {
            "state": ocp.args.StandardSave(state),
            "data": ocp.args.JsonSave(data_item(data_state, state)),
        }
        if self._config_json is not None:
            items["config"] = ocp.args.JsonSave(self._config_json)
        had_pending = self._best.pending is not None
        self._wait_for_saves()
        with self._reporting_write_errors(step):  # decided together: the same line everywhere
            check_writable(self.directory)
        self._in_flight = step
        with self._reporting_write_errors(step, local=True):
            self.manager.save(step, args=ocp.args.Composite(**items), metrics=metrics, force=True)
        # manager.save waited for the previous save, so its best record can be written now.
        if had_pending:
            self._write_pending_best()
        self._best.note(step, metrics)
        return True

    def restore(
        self,
        abstract_state: Any,
        step: int | None = None,
        *,
        required_data: tuple[str, ...] = (),
    ) -> tuple[Any, dict[str, Any], int] | None:
        """Restores `step` (default: the newest readable one) into `abstract_state`'s shardings.

        `abstract_state` is a pytree of `jax.ShapeDtypeStruct` with the *current* mesh's
        shardings, so a checkpoint written on 8 devices restores on 1 and the reverse. A
        newest checkpoint that cannot be read (killed mid-write, truncated, edited) or holds a
        non-finite value is reported in one line and the previous one is used; once an older
        one restores, the broken ones are moved aside to `<step>.corrupt-<time>` (not in
        read-only mode). If none restores (a changed config, most likely), nothing is moved
        and a `UserError` says so. `required_data` names keys the data item must hold (a data
        item without them is corrupt). Returns None when there is no checkpoint.

        Every process takes the same branch (see `checkpoint_agreement`): the candidates are
        the steps every process lists, each is read and checked by each process alone (no
        collective inside a read), and the newest step that every process read correctly and
        identically is used; then each process places its own copy on the mesh.
        """
        self.manager.reload()
        unlisted: list[int] = []
        if step is not None:
            steps = [step]
        else:
            steps, unlisted = agree_on_steps(self.directory, self.all_steps())
        failures: list[tuple[int, str]] = []
        for candidate in steps:
            read = read_agreed(self.directory, candidate, functools.partial(
                read_local, self.directory, candidate, abstract_state, required_data))
            if isinstance(read, str):
                if step is not None:
                    raise UserError(f"checkpoint {candidate} in {self.directory} cannot be "
                                    f"read ({read})")
                failures.append((candidate, read))
                log.warning("checkpoint %d in %s is unreadable (%s); trying the previous one",
                            candidate, self.directory, read)
                continue
            host_state, data = read
            self._set_aside_newer(candidate, failures, unlisted)
            self.committed_step = max(candidate, self.committed_step or 0)
            return place(host_state, abstract_state), data, candidate
        if failures:
            self._nothing_restores(failures)
        return None

    def _set_aside_newer(
        self, restored: int, failures: list[tuple[int, str]], unlisted: list[int]
    ) -> None:
        """An older checkpoint of the same structure restored, so the newer ones are broken:
        moves them aside, so that their step numbers can be saved again."""
        for bad, why in failures:
            self._quarantine(bad, why)
            self.skipped.append((bad, why))
        for newer in (s for s in unlisted if s > restored):
            self._quarantine(newer, "not listed by every process", suffix="unlisted")

    def _nothing_restores(self, failures: list[tuple[int, str]]) -> None:
        """Nothing restores: more likely a changed config or model than corruption, so nothing
        is moved; raises the `UserError` naming the newest failure."""
        newest, why = failures[0]
        raise UserError(
            f"no checkpoint in {self.directory} can be restored into this run's state "
            f"(newest, {newest}: {why}); if the config or model changed, use the "
            "original config or a new --workdir"
        )

    def _quarantine(self, step: int, why: str, suffix: str = "corrupt") -> None:
        """Moves an unreadable step aside (`checkpoint_agreement.move_aside`); never in
        read-only mode."""
        if self.read_only:
            return
        move_aside(self.directory, step, why, suffix)
        self.manager.reload()

    def reached_preemption(self, step: int) -> bool:
        """Multi-host: True on every process at the same step once any got a preemption notice.

        Single-process runs handle SIGTERM themselves (see `wgan_jax.train`); this is False.
        """
        if jax.process_count() == 1:
            return False
        return self.manager.reached_preemption(step)

    # ---- waiting and write errors --------------------------------------------------------

    def _wait_for_saves(self) -> None:
        with self._reporting_write_errors(self._in_flight, local=True):
            self.manager.wait_until_finished()
            self.manager.check_for_errors()
        if self._in_flight is not None:
            self.committed_step = max(self._in_flight, self.committed_step or 0)
        self._in_flight = None

    @contextlib.contextmanager
    def _reporting_write_errors(self, step: int | None, local: bool = False) -> Iterator[None]:
        """Turns a failed write (disk full, permissions) into a one-line `UserError`; `local`:
        it failed on this process alone (named in the line when there are several)."""
        try:
            yield
        except Exception as error:
            if not is_io_error(error):
                raise
            line = self._write_error_line(step, error, local)
            self._in_flight = None
            raise UserError(line) from error

    def _write_error_line(self, step: int | None, error: BaseException, local: bool) -> str:
        """The one line of a failed write of checkpoint `step`."""
        committed = [s for s in self.manager.all_steps() if s != self._in_flight]
        newest = max(committed) if committed else None
        if not fs.is_remote(self.directory):  # what is on disk: a failed step is not
            with contextlib.suppress(OSError):
                newest = max((int(n) for n in os.listdir(self.directory) if n.isdigit()),
                             default=None)
        kept = f"newest committed: {newest}" if newest is not None else "none committed yet"
        where = on_process(jax.process_index()) if local else ""
        return (f"checkpoint {step} could not be written to {self.directory}{where} "
                f"({reason(error)[:160]}); the committed checkpoints are intact ({kept}): fix "
                "the cause and run again to resume")

    def wait(self) -> None:
        """Blocks until every started save is committed (then records the best step)."""
        self._wait_for_saves()
        self._write_pending_best()

    def close(self) -> None:
        """Waits for a save in flight (unless read-only) and closes orbax's manager."""
        if self._observer is not None:
            self._observer.remove()
        if not self.read_only:
            self.wait()
        self.manager.close()


class _BackgroundFailures(logging.Filter):
    """Sees the error orbax's writer thread logs, with its exception, when an asynchronous
    save fails, and hands an I/O error to `report` (once). It sits first among the filters of
    absl's logger (orbax logs through absl), before `cli`'s filter that keeps orbax's error
    records off the terminal; it never drops a record itself."""

    def __init__(self, report: Callable[[BaseException], Any]) -> None:
        super().__init__()
        self._report = report
        self._reported = False

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if (not self._reported and error is not None and record.levelno >= logging.ERROR
                and f"{os.sep}orbax{os.sep}" in record.pathname and is_io_error(error)):
            self._reported = True
            self._report(error)
        return True

    def install(self) -> None:
        logging.getLogger("absl").filters.insert(0, self)

    def remove(self) -> None:
        logging.getLogger("absl").removeFilter(self)
