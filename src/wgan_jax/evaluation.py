"""Early stopping: a stream of evaluations turned into a stop decision.

`EarlyStopping`'s bookkeeping is JSON, so checkpoints can carry it. Which metric is better
which way is `wgan_jax.metrics.ranking`'s rule.
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections

from wgan_jax.metrics.ranking import lower_is_better


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
        return {"best": self.best, "bad_evaluations": self.bad_evaluations}

    def set_state(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        best = state.get("best")
        self.best = None if best is None else float(best)
        self.bad_evaluations = int(state.get("bad_evaluations", 0))


def make_early_stopping(
    config: ml_collections.ConfigDict, evaluator: Any
) -> EarlyStopping | None:
    """`EarlyStopping` on `evaluator.metric`, or None when evaluation or patience is off."""
    if evaluator is None or not config.eval_every or config.early_stopping.patience <= 0:
        return None
    return EarlyStopping(config.early_stopping.patience, lower_is_better(evaluator.metric))
