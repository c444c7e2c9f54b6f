"""The training loop's policies: what is due after an iteration, when to roll back, when to stop.

Pure host-side rules over plain numbers, with JSON bookkeeping that checkpoints carry, so a
resumed run decides exactly as an uninterrupted one:

* `due_actions` is the one rule for what the loop does after iteration `step` besides the step
  itself, on the run's `Schedule` (how often each action recurs): log a row, feed the guard,
  draw samples, plot, evaluate, and which checkpoint to save (periodic, after an evaluation,
  on a stop signal, on an early stop, at the end);
* `DivergenceGuard` decides rollbacks from the logged metrics (non-finite updates, a loss
  explosion);
* `EarlyStopping` turns a stream of evaluations into a stop decision.

Which metric is better which way is `wgan_jax.metrics.ranking`'s rule. The rules take plain
values or the frozen `Schedule` (the trainer builds it once, `Schedule.from_config`), never the
run's config.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import ml_collections
import numpy as np

from wgan_jax.metrics.ranking import lower_is_better

__all__ = ["Schedule", "Due", "due_actions", "itstime", "DivergenceGuard", "EarlyStopping",
           "make_early_stopping"]

# Why a checkpoint is saved after an iteration (`Due.checkpoint`); "" when none is.
PERIODIC, EVALUATION, STOP, EARLY_STOP, END = "periodic", "evaluation", "stop", "early_stop", "end"


@dataclasses.dataclass(frozen=True)
class Due:
    """What the loop does after an iteration besides the step itself."""

    log: bool  # a metrics row (also on the step a stop signal arrives)
    guard: bool  # the row is a regular one and feeds the divergence guard
    sample: bool
    plot: bool
    evaluate: bool
    checkpoint: str  # "" or why one is saved: PERIODIC, EVALUATION, STOP, EARLY_STOP or END
    stop: bool  # the loop ends after this iteration (a stop signal or an early stop)

    @property
    def deferrable(self) -> bool:
        """Whether the checkpoint is a periodic one, which waits while updates are skipped as
        non-finite (the others are saved in any case: a non-finite state never is)."""
        return self.checkpoint == PERIODIC


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How often the loop's actions recur, in generator iterations (0: never in the loop;
    logging and evaluation also happen after the last iteration, `num_iterations`)."""

    num_iterations: int
    log_every: int
    eval_every: int = 0
    checkpoint_every: int = 0
    sample_every: int = 0
    plot_every: int = 0

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> Schedule:
        """The schedule of a run's config."""
        return cls(
            num_iterations=config.num_iterations, log_every=config.log_every,
            eval_every=config.eval_every, checkpoint_every=config.checkpoint_every,
            sample_every=config.sample_every, plot_every=config.plot_every,
        )


def itstime(step: int, every: int, total: int, *, last: bool = False) -> bool:
    """Whether an action run every `every` iterations (0: never) is due after `step`;
    with `last`, also after the final iteration `total`."""
    return (every > 0 and step % every == 0) or (last and step == total)


def due_actions(schedule: Schedule, step: int, *, stopping: bool,
                evaluating: bool, is_main: bool, early_stop: bool = False) -> Due:
    """The one rule deciding the loop's actions after iteration `step` of `schedule`.

    `stopping`: a stop signal (or a preemption notice) arrived; `evaluating`: the run has an
    evaluator; `early_stop`: the evaluation at this step asked to stop (the loop asks again
    once it has evaluated). Only regular logging rows feed the guard, so that the extra row of a
    stop step cannot make a resumed run decide differently; no evaluation starts once a stop
    was requested. Every evaluation is followed by a checkpoint (it competes for
    checkpoints/best.json), as are a stop, an early stop and the end.
    """
    total = schedule.num_iterations
    regular_row = itstime(step, schedule.log_every, total, last=True)
    evaluate = evaluating and not stopping and itstime(step, schedule.eval_every, total, last=True)
    if stopping:
        checkpoint = STOP
    elif early_stop:
        checkpoint = EARLY_STOP
    elif step == total:
        checkpoint = END
    elif evaluate:
        checkpoint = EVALUATION
    elif itstime(step, schedule.checkpoint_every, total):
        checkpoint = PERIODIC
    else:
        checkpoint = ""
    return Due(
        log=regular_row or stopping,
        guard=regular_row,
        sample=is_main and itstime(step, schedule.sample_every, total),
        plot=is_main and itstime(step, schedule.plot_every, total),
        evaluate=evaluate,
        checkpoint=checkpoint,
        stop=stopping or early_stop,
    )


class DivergenceGuard:
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

    def __init__(self, max_consecutive_nonfinite: int, loss_explosion_factor: float) -> None:
        """`max_consecutive_nonfinite` skipped updates in a row, or a critic loss above
        `loss_explosion_factor` times the running median (0: off), ask for a rollback (the
        config keys of the same names)."""
        self.max_consecutive = max_consecutive_nonfinite
        self.explosion_factor = loss_explosion_factor
        self.lr_scale = 1.0
        self.rollbacks = 0
        self.losses: list[float] = []

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the guard (JSON): the learning-rate scale, the
        rollbacks so far and the recent losses."""
        return {"lr_scale": self.lr_scale, "rollbacks": self.rollbacks,
                "losses": list(self.losses)}

    def load(self, saved: dict[str, Any]) -> None:
        """Takes the bookkeeping from a checkpoint's data item (also those written before the
        guard had its own key: only `lr_scale` then)."""
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


class EarlyStopping:
    """Stops after `patience` evaluations in a row without improving on the best value.

    `patience` 0 never stops. A non-finite value never counts as an improvement. The state
    (`get_state`/`set_state`) is a small JSON dict, saved with the checkpoint so a resumed run
    decides exactly as an uninterrupted one.
    """

    def __init__(self, patience: int, lower_is_better: bool = True, min_delta: float = 0.0):
        self.patience = int(patience)
        self.lower_is_better = bool(lower_is_better)
        self.min_delta = float(min_delta)
        self.best: float | None = None
        self.bad_evaluations = 0

    def improved(self, value: float) -> bool:
        """Whether `value` beats the best so far by more than `min_delta`."""
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.lower_is_better:
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def update(self, value: float) -> bool:
        """Records one evaluation; True when training should stop now."""
        value = float(value)
        if self.improved(value):
            self.best = value
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
        return self.patience > 0 and self.bad_evaluations >= self.patience

    def get_state(self) -> dict[str, Any]:
        """What a checkpoint keeps (JSON): the best value and the bad evaluations since."""
        return {"best": self.best, "bad_evaluations": self.bad_evaluations}

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Continues from `get_state()`'s record (None: from the start)."""
        state = state or {}
        best = state.get("best")
        self.best = None if best is None else float(best)
        self.bad_evaluations = int(state.get("bad_evaluations", 0))


def make_early_stopping(metric: str, *, patience: int, eval_every: int) -> EarlyStopping | None:
    """`EarlyStopping` on `metric` (the eval plan's ranking metric; "" when the run has no
    evaluator) with `patience` (`config.early_stopping.patience`), or None when evaluation
    (`eval_every` 0) or patience (0) is off."""
    if not metric or not eval_every or patience <= 0:
        return None
    return EarlyStopping(patience, lower_is_better(metric))
