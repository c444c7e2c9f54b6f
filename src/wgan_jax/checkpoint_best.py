"""The best-checkpoint record: which kept checkpoint ranks best by the run's metric.

The record lives in `checkpoints/best.json` (`{"step", "metric", "value"}`), written by the
checkpointer only once that step is committed, so tools need not trust orbax's metric
bookkeeping. A resumed run carries the record over (`carry_over`); a checkpoint's rank for
orbax's best-N policy is `score` (lower is better); which way a metric is better is
`wgan_jax.metrics.ranking`'s rule, the one evaluation and `diagnose` use. No JAX here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from wgan_jax import fs
from wgan_jax.metrics import ranking
from wgan_jax.metrics.ranking import lower_is_better

__all__ = ["BestRecord", "carry_over", "lower_is_better", "read_best_file", "score",
           "write_best_file"]


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


def carry_over(best_metric: str, recorded: dict[str, Any] | None) -> tuple[str, float | None, str]:
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
    value = float(recorded["value"]) if recorded and metric else None
    if renamed:
        return metric, value, best_metric
    same = bool(metric) and metric == best_metric
    return best_metric, value if same else None, ""


def score(best_metric: str, metrics: Any) -> float:
    """A checkpoint's rank for the best-N policy: lower is better; unknown is worst."""
    if not best_metric or not isinstance(metrics, dict):
        return math.inf
    value = metrics.get(best_metric)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return math.inf
    return float(value) if lower_is_better(best_metric) else -float(value)


class BestRecord:
    """One checkpointer's ranking state: the metric, the best value so far, the record waiting
    for its step to be committed (`pending`) and an earlier run's metric name still in use
    until the new name is reported (see `carry_over`)."""

    def __init__(self, path: str, best_metric: str) -> None:
        self.path = path
        self.metric, self.value, self._renamed = carry_over(
            ranking.normalise(best_metric), read_best_file(path))
        self.pending: dict[str, Any] | None = None

    def score(self, metrics: Any) -> float:
        """`score` by the current metric (handed to orbax, which calls it for every step)."""
        return score(self.metric, metrics)

    def adopt_new_name(self, metrics: dict[str, float]) -> None:
        """Ranks by the new metric name from the first save that reports it."""
        if self._renamed and self._renamed in metrics:  # an earlier run's metric, renamed
            self.metric, self._renamed = self._renamed, ""

    def note(self, step: int, metrics: dict[str, float]) -> None:
        """Makes `step` the pending best when its metric beats the best value so far."""
        if math.isfinite(self.score(metrics)):
            value = metrics[self.metric]
            current = self.value
            if current is None or ranking.is_better(self.metric, value, current):
                self.value = value
                self.pending = {"step": step, "metric": self.metric, "value": value}

    def take_committed(self, committed: Callable[[], Iterable[int]]) -> dict[str, Any] | None:
        """The pending record once its step is among `committed()` (then no longer pending)."""
        pending = self.pending
        if pending is None or pending["step"] not in committed():
            return None
        self.pending = None
        return pending

    def best(
        self, steps: Callable[[], list[int]], metrics_of: Callable[[int], Any]
    ) -> dict[str, Any] | None:
        """`{"step", "metric", "value"}` of the best of `steps()`, or None before any eval.

        Read from best.json; if that step is gone (or the file is missing), recomputed from
        `metrics_of(step)` (the metrics orbax stored beside each checkpoint).
        """
        record = read_best_file(self.path)
        kept = steps()
        if record is not None and record["step"] in kept:
            return record
        metric = self.metric or (record or {}).get("metric", "")
        if not metric:
            return None
        best = None
        for step in kept:
            try:
                value = (metrics_of(step) or {}).get(metric)
            except Exception:  # noqa: BLE001 - a checkpoint without readable metrics
                continue
            if not isinstance(value, int | float) or not math.isfinite(value):
                continue
            better = best is None or ranking.is_better(metric, value, float(best["value"]))
            if better:
                best = {"step": step, "metric": metric, "value": float(value)}
        return best
