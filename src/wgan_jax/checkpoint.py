"""Checkpoints with orbax: async saves, newest-N plus best retention, fallback on corruption.

A checkpoint holds the whole `TrainState` and the data iterator's position, so a resumed run
continues bit for bit. Retention uses orbax preservation policies (latest N *or* best), never
`best_fn` with `max_to_keep`, which can delete the newest checkpoint. The best step is also
recorded in `checkpoints/best.json` by us, so tools need not trust orbax's metric bookkeeping.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as cm

from wgan_jax.errors import UserError

log = logging.getLogger(__name__)


def _lower_is_better(metric: str) -> bool:
    name = metric.split("/")[-1]
    return not any(word in name for word in ("modes", "precision", "recall", "coverage",
                                             "density", "inception_score", "high_quality"))


class Checkpointer:
    """Saves and restores `(state, data_state)` under `WORKDIR/checkpoints/`."""

    def __init__(self, workdir: str, *, keep: int = 3, best_metric: str = "") -> None:
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.best_metric = best_metric
        self._best_path = os.path.join(self.directory, "best.json")
        policies: list[Any] = [cm.LatestN(n=keep)]
        if best_metric:
            policies.append(
                cm.BestN(
                    get_metric_fn=lambda m: m[best_metric],
                    reverse=_lower_is_better(best_metric),
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=cm.AnyPreservationPolicy(policies),
            enable_async_checkpointing=True,
            create=True,
            cleanup_tmp_directories=True,
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def best(self) -> dict[str, Any] | None:
        """{"step", "metric", "value"} of the best checkpoint so far, if any."""
        if not os.path.exists(self._best_path):
            return None
        with open(self._best_path) as f:
            return json.load(f)

    def save(
        self,
        step: int,
        state: Any,
        data_state: dict[str, Any],
        metrics: dict[str, float] | None = None,
    ) -> None:
        """Starts an asynchronous save of step `step`; `metrics` feed the best-N policy."""
        if step in self.manager.all_steps():
            return
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(data_state),
            ),
            metrics=metrics or None,
        )
        if self.best_metric and self.best_metric in metrics:
            value = metrics[self.best_metric]
            best = self.best()
            better = best is None or (
                value < best["value"] if _lower_is_better(self.best_metric)
                else value > best["value"]
            )
            if better and np.isfinite(value) and jax.process_index() == 0:
                tmp = self._best_path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"step": step, "metric": self.best_metric, "value": value}, f)
                os.replace(tmp, self._best_path)

    def restore(
        self, abstract_state: Any, step: int | None = None
    ) -> tuple[Any, dict[str, Any], int] | None:
        """Restores `step` (default: newest readable) into the shardings of `abstract_state`.

        A newest checkpoint that cannot be read (killed mid-write, truncated) is reported in one
        line and the previous one is used. Returns None when there is no checkpoint.
        """
        steps = [step] if step is not None else list(reversed(self.all_steps()))
        for candidate in steps:
            try:
                restored = self.manager.restore(
                    candidate,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(abstract_state),
                        data=ocp.args.JsonRestore(),
                    ),
                )
            except Exception as error:  # noqa: BLE001 - any unreadable checkpoint is skipped
                if step is not None:
                    raise UserError(f"checkpoint {candidate} in {self.directory} cannot be "
                                    f"read: {type(error).__name__}") from error
                log.warning("checkpoint %d in %s is unreadable (%s: %s); trying the previous one",
                            candidate, self.directory, type(error).__name__,
                            str(error).splitlines()[0][:200] if str(error) else "")
                continue
            return restored.state, dict(restored.data), candidate
        return None

    def wait(self) -> None:
        """Blocks until every started save is committed."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


class WorkdirLock:
    """An exclusive lock on a workdir, so two trainers never write the same checkpoints."""

    def __init__(self, workdir: str) -> None:
        self.path = os.path.join(workdir, ".lock")
        self._file = None

    def acquire(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held for the process's lifetime
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
