"""Checkpoints with orbax: async saves, newest-N plus best retention, fallback on corruption.

A checkpoint (`WORKDIR/checkpoints/<step>/`) holds three items: `state` (the whole
`TrainState`: both networks, BatchNorm statistics, both optimizer states, the EMA generator,
the step and the base RNG key), `data` (the data iterator's position and the trainer's guard
bookkeeping, JSON) and `config` (the run's config, JSON). A resumed run therefore continues
bit for bit.

Retention uses orbax preservation policies, *latest N or best 1*, never `best_fn` with
`max_to_keep` (that combination can delete the newest checkpoint). Orbax deletes old steps only
after a newer one is committed, so the last good checkpoint always survives a crash. The best
step is also recorded by us in `checkpoints/best.json`, written only once that step is
committed, so tools need not trust orbax's metric bookkeeping.

Evaluation feeds the "best" policy by passing its metrics to `Checkpointer.save(..., metrics=)`
at the step it ran; `best_metric` is the key that ranks them, chosen once by the caller (the
trainer hands over the eval plan's `EvalPlan.metric`; which way is better is
`wgan_jax.metrics.ranking`'s rule, the one evaluation and `diagnose` use).

WORKDIR may be a URL (`gs://bucket/run`): the checkpoint directory is then handed to orbax as
is, our own files go through `wgan_jax.fs`, and the workdir lock is skipped.

Nothing is lost to a fault: the `data` item also holds a fingerprint of every array of the
state and one of itself, so corrupt array bytes (which the file formats may read back without
complaint) and an edited data position are found on restore. A checkpoint is set aside only
when its content fails to parse or to match
(`CheckpointContentError`); a read that fails with an I/O error (`OSError`, or a TensorStore
status such as UNAVAILABLE, e.g. on a network file system) is retried `READ_ATTEMPTS` times and
then stops the run in one line (`UserError`) without setting anything aside, and a write that
fails (disk full) stops the run in one line with the committed checkpoints intact. A
checkpoint that cannot be moved aside is never deleted.

With several processes every decision that could part them is taken together (`_vote`): the
step list, each candidate's outcome (read locally, without orbax's cross-process barriers),
retries, moving a step aside, the workdir lock and a save's folder check; each process then
places its own copy of the agreed step on the mesh.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers as cm

from wgan_jax import fs
from wgan_jax.errors import UserError
from wgan_jax.metrics import ranking
from wgan_jax.metrics.ranking import lower_is_better

log = logging.getLogger("wgan_jax")

READ_ATTEMPTS = 4  # reads of one checkpoint that fail with an I/O error before giving up
READ_BACKOFF_SECONDS = 0.25  # doubled after every failed attempt
FINGERPRINT_KEY = "state_fingerprint"  # in the data item: one uint32 per state leaf
DATA_FINGERPRINT_KEY = "data_fingerprint"  # in the data item: a hash of the rest of it

# TensorStore (orbax's array reader and writer) reports errors as `ValueError("CODE: ...")`;
# these codes are the storage's fault (errno-derived or remote), not the content's.
_IO_STATUS = re.compile(
    r"^(UNAVAILABLE|DEADLINE_EXCEEDED|PERMISSION_DENIED|RESOURCE_EXHAUSTED|ABORTED|"
    r"UNAUTHENTICATED): "
)


class CheckpointContentError(ValueError):
    """A checkpoint was read but its content is wrong (shape, step, values, fingerprint)."""


def is_io_error(error: BaseException) -> bool:
    """Whether `error` (or an exception it wraps) is a storage failure rather than bad content.

    `OSError`s count, except a missing file: inside a committed checkpoint that means the
    checkpoint is incomplete, which is its content's fault.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and not isinstance(current, FileNotFoundError):
            return True
        if _IO_STATUS.match(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False



@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def all_finite(tree: Any) -> bool:
    """Whether every floating-point leaf of `tree` is finite (one device-to-host sync)."""
    return bool(_all_finite(tree))


def _leaf_fingerprint(x: jax.Array) -> jax.Array:
    bits = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    width = bits.dtype.itemsize
    if width == 8:
        bits = jax.lax.bitcast_convert_type(bits, jnp.uint32)  # [..., 2]
    elif not jnp.issubdtype(bits.dtype, jnp.unsignedinteger):
        bits = jax.lax.bitcast_convert_type(bits, jnp.dtype(f"uint{8 * width}"))
    bits = bits.astype(jnp.uint32).ravel()
    # An odd weight per position: changing any one element always changes the sum mod 2**32.
    weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) | jnp.uint32(1)
    return jnp.sum(bits * weights, dtype=jnp.uint32)


@jax.jit
def _fingerprint(tree: Any) -> list[jax.Array]:
    return [_leaf_fingerprint(x) for x in jax.tree.leaves(tree)]


def fingerprint(tree: Any) -> list[int]:
    """One uint32 per leaf of `tree`: a position-weighted sum of its bit patterns.

    Computed on the devices (only the sums are copied), in integer arithmetic, so it is the
    same for the same values on any mesh; any change of a single element changes it.
    """
    return [int(v) for v in jax.device_get(_fingerprint(tree))]


def _ranking(best_metric: str, recorded: dict[str, Any] | None) -> tuple[str, float | None, str]:
    """`(metric, best value so far, new name)` for ranking checkpoints, given `best_metric` and
    the record of an earlier run (best.json).

    A resumed run keeps the record's metric and value when `best_metric` is "" or names it
    (`eval/fid` for `eval/fid_digits`). A record under an earlier name of `best_metric` (runs
    from before metric names carried their feature space wrote `eval/fid` where the plan now
    says `eval/fid_digits`) keeps ranking the stored checkpoints by that name, with its value,
    until the first save that reports `best_metric` (the new name returned).
    """
    metric = recorded.get("metric", "") if recorded else ""
    if metric and ranking.choose_metric([metric], best_metric):
        best_metric = metric
    renamed = (metric != best_metric and bool(metric)
               and ranking.choose_metric([best_metric], metric) == best_metric)
    if renamed:
        return metric, float(recorded["value"]), best_metric
    same = bool(metric) and metric == best_metric
    return best_metric, float(recorded["value"]) if same else None, ""


class Checkpointer:
    """Saves and restores `(state, data_state)` under `WORKDIR/checkpoints/`.

    `best_metric` is the `eval/...` key whose values (`save(..., metrics=)`) rank checkpoints
    for the best-checkpoint policy and best.json ("": none ranks them; a bare NAME means
    `eval/NAME`).

    `read_only=True` is for tools (sampling, evaluation) that read a workdir a trainer may be
    writing: it never cleans temporary directories, deletes or renames anything.
    """

    def __init__(
        self,
        workdir: str,
        *,
        keep: int = 3,
        best_metric: str = "",
        read_only: bool = False,
        config_json: dict[str, Any] | None = None,
    ) -> None:
        self.directory = fs.abspath(fs.join(workdir, "checkpoints"))
        self.read_only = read_only
        self._best_path = fs.join(self.directory, "best.json")
        self._config_json = config_json
        self._pending_best: dict[str, Any] | None = None
        self._in_flight: int | None = None  # the step whose asynchronous save may be running
        self.skipped: list[tuple[int, str]] = []  # unreadable checkpoints met by restore()
        self.best_metric, self._best_value, self._renamed = _ranking(
            ranking.normalise(best_metric), self._read_best_file())
        policy = cm.AnyPreservationPolicy([
            cm.LatestN(n=keep),
            # Scores are "lower is better"; BestN keeps the last n after a descending sort.
            cm.BestN(get_metric_fn=self._score, reverse=True, n=1,
                     keep_checkpoints_without_metrics=False),
        ])
        options = ocp.CheckpointManagerOptions(
            preservation_policy=None if read_only else policy,
            best_fn=self._score,  # makes orbax store each step's metrics for BestN on restart
            best_mode="min",
            enable_async_checkpointing=not read_only,
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            read_only=read_only,
        )
        if not read_only:
            self._create_directory()
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def _create_directory(self) -> None:
        """Process 0 creates the checkpoint directory; a failure stops every process with the
        same line (orbax would raise on process 0 alone and leave the others in a barrier)."""
        failure = ""
        if jax.process_index() == 0 and not fs.is_remote(self.directory):
            try:
                fs.makedirs(self.directory)
                if not os.access(self.directory, os.W_OK | os.X_OK):
                    raise PermissionError(13, "Permission denied", self.directory)
            except OSError as error:
                failure = (f"checkpoint directory {self.directory} cannot be written "
                           f"({_reason(error)}); fix its permissions or choose another "
                           "--workdir")
        failure = _agreed_failure(failure)
        if failure:
            raise UserError(failure)

    # ---- metrics and the best checkpoint -------------------------------------------------

    def _score(self, metrics: Any) -> float:
        """A checkpoint's rank for the best-N policy: lower is better; unknown is worst."""
        if not self.best_metric or not isinstance(metrics, dict):
            return math.inf
        value = metrics.get(self.best_metric)
        if not isinstance(value, int | float) or not math.isfinite(value):
            return math.inf
        return float(value) if lower_is_better(self.best_metric) else -float(value)

    def _read_best_file(self) -> dict[str, Any] | None:
        return read_best_file(self._best_path)

    def _write_pending_best(self) -> None:
        """Records the pending best step in best.json once its checkpoint is committed."""
        pending = self._pending_best
        if pending is None or pending["step"] not in self.manager.all_steps():
            return
        self._pending_best = None
        if jax.process_index() != 0 or self.read_only:
            return
        write_best_file(self._best_path, pending)

    def best(self) -> dict[str, Any] | None:
        """`{"step", "metric", "value"}` of the best kept checkpoint, or None before any eval.

        Read from best.json; if that step is gone (or the file is missing), recomputed from the
        metrics orbax stored beside each checkpoint.
        """
        record = self._read_best_file()
        steps = self.all_steps()
        if record is not None and record["step"] in steps:
            return record
        metric = self.best_metric or (record or {}).get("metric", "")
        if not metric:
            return None
        best = None
        for step in steps:
            try:
                value = (self.manager.metrics(step) or {}).get(metric)
            except Exception:  # noqa: BLE001 - a checkpoint without readable metrics
                continue
            if not isinstance(value, int | float) or not math.isfinite(value):
                continue
            better = best is None or ranking.is_better(metric, value, best["value"])
            if better:
                best = {"step": step, "metric": metric, "value": float(value)}
        return best

    # ---- steps, save, restore ------------------------------------------------------------

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
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
        if _any_process(step in self.manager.all_steps()):
            return False
        if not all_finite(state):
            log.warning("state at step %d has non-finite values; checkpoint not saved", step)
            return False
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        if self._renamed and self._renamed in metrics:  # an earlier run's metric, renamed
            self.best_metric, self._renamed = self._renamed, ""
        data = json.loads(json.dumps({**data_state, FINGERPRINT_KEY: fingerprint(state)}))
        data[DATA_FINGERPRINT_KEY] = _data_fingerprint(data)
        items: dict[str, Any] = {
            "state": ocp.args.StandardSave(state),
            "data": ocp.args.JsonSave(data),
        }
        if self._config_json is not None:
            items["config"] = ocp.args.JsonSave(self._config_json)
        previous_pending = self._pending_best
        self._wait_for_saves()
        with self._reporting_write_errors(step):
            self._check_writable()
            self.manager.save(step, args=ocp.args.Composite(**items), metrics=metrics, force=True)
        self._in_flight = step
        # manager.save waited for the previous save, so its best record can be written now.
        if previous_pending is not None:
            self._write_pending_best()
        score = self._score(metrics)
        if math.isfinite(score):
            value = metrics[self.best_metric]
            current = self._best_value
            if current is None or ranking.is_better(self.best_metric, value, current):
                self._best_value = value
                self._pending_best = {"step": step, "metric": self.best_metric, "value": value}
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

        Every process takes the same branch (see `_vote`): the candidates are the steps every
        process lists, each is read and checked by each process alone (no collective inside
        a read), and the newest step that every process read correctly and identically is
        used; then each process places its own copy on the mesh.
        """
        self.manager.reload()
        unlisted: list[int] = []
        if step is not None:
            steps = [step]
        else:
            steps, unlisted = self._agree_on_steps(self.all_steps())
        failures: list[tuple[int, str]] = []
        for candidate in steps:
            read = self._read_agreed(candidate, abstract_state, required_data)
            if isinstance(read, str):
                if step is not None:
                    raise UserError(f"checkpoint {candidate} in {self.directory} cannot be "
                                    f"read ({read})")
                failures.append((candidate, read))
                log.warning("checkpoint %d in %s is unreadable (%s); trying the previous one",
                            candidate, self.directory, read)
                continue
            host_state, data = read
            # An older checkpoint of the same structure restored, so the newer ones are
            # broken: move them aside, so that their step numbers can be saved again.
            for bad, reason in failures:
                self._quarantine(bad, reason)
                self.skipped.append((bad, reason))
            for newer in (s for s in unlisted if s > candidate):
                self._quarantine(newer, "not listed by every process", suffix="unlisted")
            return _place(host_state, abstract_state), data, candidate
        if failures:
            # Nothing restores: more likely a changed config or model than corruption, so
            # nothing is moved.
            newest, reason = failures[0]
            raise UserError(
                f"no checkpoint in {self.directory} can be restored into this run's state "
                f"(newest, {newest}: {reason}); if the config or model changed, use the "
                "original config or a new --workdir"
            )
        return None

    def _agree_on_steps(self, local: list[int]) -> tuple[list[int], list[int]]:
        """(the steps every process lists, newest first; the steps only some list).

        A stale listing on one process (a network file system's cache) must not make the
        processes restore different steps: they use the common ones and say so in one line.
        """
        if jax.process_count() == 1:
            return list(reversed(local)), []
        width = int(_allgather(np.asarray([len(local)], np.int32)).max())
        padded = np.full(max(width, 1), -1, np.int32)
        padded[: len(local)] = local
        listings = [{int(s) for s in row if s >= 0} for row in _allgather(padded)]
        common = set.intersection(*listings)
        unlisted = sorted(set.union(*listings) - common)
        if unlisted and jax.process_index() == 0:
            seen = "; ".join(f"process {i}: {sorted(x)[-5:]}" for i, x in enumerate(listings))
            log.warning("checkpoint listings in %s differ between processes (%s): using the "
                        "newest step every process lists (%s); newer ones are moved aside "
                        "as <step>.unlisted-<time>", self.directory, seen,
                        max(common) if common else "none")
        return sorted(common, reverse=True), unlisted

    def _read_agreed(
        self, step: int, abstract_state: Any, required_data: tuple[str, ...]
    ) -> tuple[Any, dict[str, Any]] | str:
        """Reads `step` on every process and returns what all of them decide together:
        `(host_state, data)` when every process read it correctly and identically, else the
        reason it is unreadable (content). An I/O error on any process is retried by all
        (`READ_ATTEMPTS` in all) and then stops every process with the same `UserError`.
        """
        result: tuple[Any, dict[str, Any], bytes] | None = None
        for attempt in range(1, READ_ATTEMPTS + 1):
            kind, reason = _OK, ""
            if result is None:
                try:
                    result = self._read(step, abstract_state, required_data)
                except Exception as error:  # noqa: BLE001 - classified, then voted on
                    kind = _IO if is_io_error(error) else _CONTENT
                    reason = _reason(error)
            votes = _vote(kind, reason, result[2] if result is not None else b"")
            io = [(i, r) for i, (k, r, _) in enumerate(votes) if k == _IO]
            if io and attempt < READ_ATTEMPTS:
                delay = READ_BACKOFF_SECONDS * 2 ** (attempt - 1)
                log.warning("checkpoint %d: I/O error while reading%s (%s); retrying in %.2g s",
                            step, _on_process(io[0][0]), io[0][1], delay)
                time.sleep(delay)
                continue
            break
        if io:
            where, why = io[0]
            raise UserError(
                f"checkpoint {step} in {self.directory} cannot be read{_on_process(where)}: "
                f"I/O error in {READ_ATTEMPTS} attempts ({why}); nothing was set aside, check "
                "the file system and run again"
            )
        content = [(i, r) for i, (k, r, _) in enumerate(votes) if k == _CONTENT]
        if content:
            where, why = content[0]
            return f"{why}{_on_process(where)}"
        if len({digest for _, _, digest in votes}) > 1:
            return "the processes read different contents"
        assert result is not None
        return result[0], result[1]

    def _read(
        self, step: int, abstract_state: Any, required_data: tuple[str, ...]
    ) -> tuple[Any, dict[str, Any], bytes]:
        """Reads and checks one checkpoint on this process alone, as host arrays.

        No collective runs here (orbax's restore has cross-process barriers, which a process
        whose read fails would leave the others waiting in). Returns (host state, data,
        digest of what was read); raises on an I/O error, and `CheckpointContentError` (or
        the reader's own error) for content that does not parse or does not match.
        """
        directory = epath.Path(self.directory) / str(step)
        data = ocp.JsonCheckpointHandler().restore(directory / "data")
        data = _check_data(data, required_data)
        expected = data.pop(FINGERPRINT_KEY, None)
        handler = ocp.PyTreeCheckpointHandler()
        try:
            host_state = handler.restore(directory / "state", args=ocp.args.PyTreeRestore(
                item=abstract_state,
                restore_args=jax.tree.map(
                    lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract_state),
            ))
        finally:
            handler.close()
        _check_shapes(host_state, abstract_state)
        saved_step = getattr(host_state, "step", None)
        if saved_step is not None and int(saved_step) != step:
            raise CheckpointContentError(f"holds step {int(saved_step)}")
        found = fingerprint(host_state)
        if expected is not None and found != [int(v) for v in expected]:
            raise CheckpointContentError("array data does not match the fingerprint saved "
                                         "with it (corrupt bytes)")
        if not all_finite(host_state):
            raise CheckpointContentError("holds non-finite values")
        digest = hashlib.sha256(
            (_canonical_json(data) + json.dumps(found)).encode()).digest()[:16]
        return host_state, data, digest

    def _quarantine(self, step: int, reason: str, suffix: str = "corrupt") -> None:
        """Moves an unreadable step aside so later saves of that step number are possible.

        If the move fails, the checkpoint is left where it is (never deleted) and a
        `UserError` stops the run on every process: resuming past it would save over it.
        """
        if self.read_only:
            return
        path = fs.join(self.directory, str(step))
        failure = ""
        if jax.process_index() == 0:
            try:
                fs.rename(path, f"{path}.{suffix}-{int(time.time())}")
            except OSError as error:
                failure = _reason(error)
        failure = _agreed_failure(failure)
        if failure:
            raise UserError(
                f"checkpoint {step} in {self.directory} is unreadable ({reason[:120]}) and "
                f"could not be moved aside ({failure}); it was kept: move {path} away by hand "
                "and run again"
            )
        self.manager.reload()

    def reached_preemption(self, step: int) -> bool:
        """Multi-host: True on every process at the same step once any got a preemption notice.

        Single-process runs handle SIGTERM themselves (see `wgan_jax.train`); this is False.
        """
        if jax.process_count() == 1:
            return False
        return self.manager.reached_preemption(step)

    def _check_writable(self) -> None:
        """Raises the `OSError` a save would meet creating its folder (no permission, a
        vanished or read-only directory), checked by every process (each writes there: a
        mount can differ between hosts) and decided together: every process raises the same
        error, naming the first process that met it.

        Checked before orbax starts: orbax's writer threads wait ~300 s for a folder that a
        failed creation never makes, and keep the process from exiting until then.
        """
        local: OSError | None = None
        if not fs.is_remote(self.directory):
            if not os.path.isdir(self.directory):
                local = OSError(2, "No such file or directory (it vanished)", self.directory)
            elif not os.access(self.directory, os.W_OK | os.X_OK):
                local = PermissionError(13, "Permission denied", self.directory)
        if jax.process_count() == 1:
            if local is not None:
                raise local
            return
        votes = _vote(_IO if local else _OK, str(local) if local else "", b"")
        failed = [(i, reason) for i, (kind, reason, _) in enumerate(votes) if kind]
        if failed:
            where, reason = failed[0]
            raise OSError(f"{reason}{_on_process(where)}")

    def _wait_for_saves(self) -> None:
        with self._reporting_write_errors(self._in_flight):
            self.manager.wait_until_finished()
            self.manager.check_for_errors()
        self._in_flight = None

    @contextlib.contextmanager
    def _reporting_write_errors(self, step: int | None) -> Iterator[None]:
        """Turns a failed write (disk full, permissions) into a one-line `UserError`."""
        try:
            yield
        except Exception as error:
            if not is_io_error(error):
                raise
            self._in_flight = None
            committed = sorted(self.manager.all_steps())
            kept = f"newest committed: {committed[-1]}" if committed else "none committed yet"
            raise UserError(
                f"checkpoint {step} could not be written to {self.directory} "
                f"({_reason(error)[:160]}); the committed "
                f"checkpoints are intact ({kept}): fix the cause and run again to resume"
            ) from error

    def wait(self) -> None:
        """Blocks until every started save is committed (then records the best step)."""
        self._wait_for_saves()
        self._write_pending_best()

    def close(self) -> None:
        if not self.read_only:
            self.wait()
        self.manager.close()


# ---- deciding together: every process reports, all take the same branch ---------------------

_OK, _CONTENT, _IO = 0, 1, 2
_REASON_BYTES = 1000
_DIGEST_BYTES = 16


def _allgather(row: np.ndarray) -> np.ndarray:
    """`[process_count, *row.shape]`: every process's `row` (a collective every process calls)."""
    if jax.process_count() == 1:
        return row[None]
    return np.asarray(multihost_utils.process_allgather(row))


def _vote(kind: int, reason: str, digest: bytes) -> list[tuple[int, str, bytes]]:
    """Every process's `(kind, reason, digest)`, in process order (a collective)."""
    encoded = reason.encode()[:_REASON_BYTES]
    row = np.zeros(1 + _DIGEST_BYTES + _REASON_BYTES, np.int32)
    row[0] = kind
    row[1: 1 + len(digest[:_DIGEST_BYTES])] = list(digest[:_DIGEST_BYTES])
    row[1 + _DIGEST_BYTES: 1 + _DIGEST_BYTES + len(encoded)] = list(encoded)
    votes = []
    for other in _allgather(row):
        text = bytes(int(b) for b in other[1 + _DIGEST_BYTES:] if b).decode(errors="replace")
        votes.append((int(other[0]), text, bytes(int(b) for b in other[1: 1 + _DIGEST_BYTES])))
    return votes


def _any_process(flag: bool) -> bool:
    """Whether `flag` holds on any process (a collective with several processes)."""
    if jax.process_count() == 1:
        return flag
    return bool(_allgather(np.asarray([int(flag)], np.int32)).max())


def _on_process(index: int) -> str:
    return f" on process {index}" if jax.process_count() > 1 else ""


# ---- reading one checkpoint -----------------------------------------------------------------


def _canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _data_fingerprint(data: dict[str, Any]) -> str:
    """A hash of the data item without its own fingerprint (its JSON, keys sorted)."""
    rest = {k: v for k, v in data.items() if k != DATA_FINGERPRINT_KEY}
    return hashlib.sha256(_canonical_json(rest).encode()).hexdigest()[:32]


def _check_data(data: Any, required: tuple[str, ...]) -> dict[str, Any]:
    """The data item without its fingerprint; `CheckpointContentError` if it is not an object,
    does not match its fingerprint (an edit) or lacks a `required` key. Items saved before
    the data fingerprint existed are checked for the required keys only."""
    if not isinstance(data, dict):
        raise CheckpointContentError("data item is not a JSON object")
    data = dict(data)
    saved = data.pop(DATA_FINGERPRINT_KEY, None)
    if saved is not None and saved != _data_fingerprint(data):
        raise CheckpointContentError("data item does not match the fingerprint saved with it "
                                     "(edited or corrupt)")
    missing = [key for key in required if key not in data]
    if missing:
        raise CheckpointContentError(f"data item lacks {', '.join(missing)}")
    return data


def _check_shapes(host_state: Any, abstract_state: Any) -> None:
    """`CheckpointContentError` naming the first leaf whose shape or dtype differs."""
    for (path, value), want in zip(jax.tree_util.tree_leaves_with_path(host_state),
                                   jax.tree.leaves(abstract_state), strict=True):
        value = np.asarray(value)
        if value.shape != tuple(want.shape) or value.dtype != want.dtype:
            raise CheckpointContentError(
                f"{jax.tree_util.keystr(path)} was saved as {value.dtype}{list(value.shape)}, "
                f"this run's state has {jnp.dtype(want.dtype)}{list(want.shape)}")


def _place(host_state: Any, abstract_state: Any) -> Any:
    """Host arrays as `jax.Array`s with `abstract_state`'s shardings; each process puts its
    own copy on its own devices (no collective), bit for bit."""
    def put(value: Any, like: Any) -> jax.Array:
        value = np.asarray(value)
        sharding = getattr(like, "sharding", None)
        if sharding is None:
            return jnp.asarray(value)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(put, host_state, abstract_state)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


_STATUS = re.compile(r"^[A-Z][A-Z_]+: ")


def _reason(error: BaseException) -> str:
    """`Type: first line` of `error`, or of the TensorStore status it wraps (orbax's own
    message for those is a repr of the whole array spec)."""
    current: BaseException | None = error
    while current is not None:
        if _STATUS.match(str(current)):
            error = current
            break
        current = current.__cause__ or current.__context__
    return f"{type(error).__name__}: {_first_line(error)}"[:200]


def read_best_file(path: str) -> dict[str, Any] | None:
    """The `{"step", "metric", "value"}` record in best.json, or None if missing or invalid."""
    try:
        record = json.loads(fs.read_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and "step" in record else None


def write_best_file(path: str, record: dict[str, Any]) -> None:
    """Replaces best.json atomically (local or URL), so readers see the old or the new record."""
    fs.write_atomic(path, json.dumps(record))


class WorkdirLock:
    """An exclusive lock on a workdir, so two trainers never write the same checkpoints.

    `flock` is released by the kernel when the process dies, so a killed trainer never leaves
    a stale lock behind. Object stores have no such lock: for a URL workdir (`gs://...`)
    `acquire` logs that and locks nothing.
    """

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.path = fs.join(workdir, ".lock")
        self._file = None

    def acquire(self) -> None:
        if fs.is_remote(self.workdir):
            log.info("workdir %s is remote: not locked (object stores have no file locks); "
                     "make sure no other trainer uses it", self.workdir)
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            handle = open(self.path, "a+")  # noqa: SIM115 - held for the process's lifetime
        except OSError as error:
            raise UserError(
                f"workdir {self.workdir} cannot be written: its lock file {self.path} cannot "
                f"be created ({_reason(error)}); choose a writable --workdir"
            ) from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise UserError(
                f"workdir {os.path.dirname(self.path)} is in use by a running trainer "
                f"({owner}); stop it or choose another --workdir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def lock_workdir(workdir: str) -> WorkdirLock | None:
    """Process 0 creates `workdir` and takes its lock; every process learns the outcome.

    A failure (a workdir in use, not writable, or a file) stops every process with the same
    `UserError`, so no process waits for one that gave up. Returns process 0's lock (None on
    the others).
    """
    lock = None
    failure = ""
    if jax.process_index() == 0:
        try:
            fs.makedirs(workdir)
            lock = WorkdirLock(workdir)
            lock.acquire()
        except UserError as error:
            lock, failure = None, str(error)
        except OSError as error:
            lock = None
            failure = (f"workdir {workdir} cannot be created ({_reason(error)}); choose a "
                       "writable --workdir")
    failure = _agreed_failure(failure)
    if failure:
        if lock is not None:
            lock.release()
        raise UserError(failure)
    return lock


def _agreed_failure(local: str) -> str:
    """The first process's non-empty failure message, the same on every process ("" if none
    failed): a collective with several processes."""
    if jax.process_count() == 1:
        return local
    return next((reason or "failed on another process"
                 for kind, reason, _ in _vote(_IO if local else _OK, local, b"") if kind), "")
