"""Health rules over the metrics stream: cheap, host-side, plain-language events.

`HealthMonitor.update(row)` is called with each metrics row (the dict written to metrics.jsonl)
and returns the events that *start* at that row. Each rule tracks episodes: it fires once when its
condition has held for `patience` consecutive rows and re-arms only after the condition has been
false for `patience` rows again, so a lasting problem yields one event, not one per step.
`analyse(rows, ...)` replays a whole stream offline (used by `wgan_jax.diagnose`).

Each rule is a small `Rule` object that owns its episodes and running statistics; the monitor
feeds every row to the list `default_rules(...)` builds for the run's loss and penalty (as an
optax chain feeds an update through its transforms), and the events come out in that order.

An event is `{"step", "rule", "message", "advice", "evidence": {...}}` (`records.event`).

Rules (their `Rule` class; metric names read; a missing metric simply skips its rule):

* `nonfinite` (`NonFinite`): any NaN/inf (or null in JSON) value, or a growing
  `nonfinite_skipped` count.
* `exploding_gradients` (`GradientNorms`): `grad_norm/critic` or `grad_norm/generator` above
  `explode_factor` times its running median (of the recent normal rows) or above `explode_abs`.
* `vanishing_gradients` (`GradientNorms`): `grad_norm/generator` below `vanish_factor` times the
  highest running median seen, or below `vanish_abs`.
* `discriminator_overpowering`: logistic/hinge/rpgan loss (`CriticOverpowering`): `critic_loss`
  below `overpower_critic_loss` while `generator_loss` climbs above `overpower_generator_rise`
  times its earlier median (or `d_fake` < `overpower_d_fake`); Wasserstein loss
  (`WassersteinGrowth`): the running median of `|wasserstein_estimate|` above
  `wasserstein_growth` times its lowest level (tracked from the second window of rows on) and
  above `wasserstein_min`, and still rising.
* `penalty_off_target` (`PenaltyOffTarget`): penalty "gp"/"lp" only:
  `input_grad_norm/interp_mean` further than `penalty_tolerance` from the target for
  `penalty_patience` rows ("lp": only above the target); with a weak penalty (`penalty_weight`
  < 1, as in the toy setting's 0.1) the tolerance is divided by the weight, since such a
  penalty is meant to hold the norm only loosely. Above the target,
  the norm must also exceed by `penalty_tolerance` the norm that the critic's own
  `wasserstein_estimate` W explains: a soft penalty lambda (k - t)^2 on a critic of slope k
  between distributions a distance D = W / k apart is balanced at k (k - t) = W / (2 lambda),
  k = (t + sqrt(t^2 + 2 W / lambda)) / 2. Early in training, while real and fake are far
  apart (W in the hundreds for 64x64 RGBA images), WGAN-GP's critic sits there by design
  (measured: `benchmarks/remedies.py`'s WGAN-GP row, norm 4.6 at W 342, 3.1 at W 139).
* `mode_collapse` (`ModeCollapse`): `diversity` (mean pairwise distance of fakes / of reals)
  below `diversity_min` and below `diversity_drop` times the highest diversity seen (it fell), or
  below `diversity_min` for `3 * window` rows without ever reaching it (the generator never
  spread out); or `eval/modes` below `modes_drop` times its best. The highest diversity is
  tracked from the end of the warm-up: a freshly initialised generator's samples are alike
  (diversity 0.2-0.35 on the RGBA sprites), often grow more alike in the first steps, and
  spread out as it learns; that is not a collapse.
* `eval_regression` (`EvalRegression`): an `eval/*` metric worse than its best by more than
  `eval_tolerance` (relative) for `eval_patience` evaluations; the evidence names the best
  step for a rollback.
* `loss_spike` (`LossSpikes`): `critic_loss` (and, except for the Wasserstein loss, whose
  generator loss has a free offset, `generator_loss`) more than `spike_factor` robust
  deviations (median absolute deviation) away from its recent median.
* `dead_units` / `saturation` (`DeadOrSaturatedUnits`): `dead_units/*` or `saturated/*` above
  `dead_max` / `saturated_max`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

import numpy as np

from wgan_jax.config import default_health_config
from wgan_jax.metrics.ranking import is_better, is_eval_score, lower_is_better
from wgan_jax.records import event

__all__ = ["HealthMonitor", "analyse", "default_rules", "format_event", "Rule", "Row", "NonFinite",
           "GradientNorms", "CriticOverpowering", "WassersteinGrowth", "PenaltyOffTarget",
           "ModeCollapse", "EvalRegression", "LossSpikes", "DeadOrSaturatedUnits",
           "penalty_balance"]

# Keys that are bookkeeping, not health signals.
_IGNORED_KEYS = ("step", "time", "timestamp", "wall_time", "epoch", "steps_per_second")


def _number(value: Any) -> float | None:
    """The float of a metric value, or None if it is not a number (None/NaN stay NaN)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return None
    return float(value)


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


class _Episode:
    """Fires once after `patience` true rows; re-arms after `patience` false rows."""

    def __init__(self, patience: int) -> None:
        self.patience = max(1, int(patience))
        self.active = False
        self.true_run = 0
        self.false_run = 0
        self.start_step: int | None = None

    def update(self, condition: bool, step: int) -> bool:
        if condition:
            self.true_run += 1
            self.false_run = 0
            if not self.active and self.true_run >= self.patience:
                self.active = True
                self.start_step = step
                return True
        else:
            self.false_run += 1
            self.true_run = 0
            if self.active and self.false_run >= self.patience:
                self.active = False
        return False


class _Median:
    """Running median over the last `window` accepted values."""

    def __init__(self, window: int) -> None:
        self.values: deque[float] = deque(maxlen=max(1, int(window)))

    def add(self, x: float) -> None:
        if math.isfinite(x):
            self.values.append(x)

    def median(self) -> float | None:
        return float(np.median(self.values)) if self.values else None

    def mad(self) -> float | None:
        if not self.values:
            return None
        v = np.asarray(self.values)
        return float(np.median(np.abs(v - np.median(v))))

    def __len__(self) -> int:
        return len(self.values)


class Row(NamedTuple):
    """One metrics row as the rules see it: its step, its numeric values (NaN for null), how
    many rows the monitor has been fed (this one included) and whether the warm-up is over."""

    step: int
    values: dict[str, float]
    rows_seen: int
    warmed_up: bool


class Rule:
    """A health rule: the thresholds, its episodes and the running statistics it owns.

    `check(row)` returns the events that start at `row`; a rule keeps whatever it needs from
    earlier rows itself. `HealthMonitor` feeds every row to its rules in their list's order.
    """

    def __init__(self, cfg: Mapping) -> None:
        self.cfg = cfg
        self.episodes: dict[str, _Episode] = {}
        self.medians: dict[str, _Median] = {}

    def check(self, row: Row) -> list[dict]:
        """The events that start at `row` (one per episode that fires there)."""
        raise NotImplementedError

    def fires(self, key: str, condition: bool, step: int, patience: int | None = None) -> bool:
        """Whether the episode `key` starts at `step` (see `_Episode`)."""
        if key not in self.episodes:
            self.episodes[key] = _Episode(self.cfg["patience"] if patience is None else patience)
        return self.episodes[key].update(condition, step)

    def median(self, key: str) -> _Median:
        """The running median named `key` (made on first use)."""
        if key not in self.medians:
            self.medians[key] = _Median(self.cfg["window"])
        return self.medians[key]

    @property
    def baseline_rows(self) -> int:
        """Values a running median needs before ratio tests against it are trusted."""
        return max(int(self.cfg["warmup"]), int(self.cfg["window"]) // 2)

    def active(self) -> dict[str, int | None]:
        """This rule's episodes still ongoing: key -> step where it started."""
        return {k: e.start_step for k, e in self.episodes.items() if e.active}


class NonFinite(Rule):
    """Any NaN/inf (or null) value, or a growing `nonfinite_skipped` count."""

    def __init__(self, cfg: Mapping) -> None:
        super().__init__(cfg)
        self.last_skipped = 0.0

    def check(self, row: Row) -> list[dict]:
        step, values = row.step, row.values
        bad = sorted(k for k, v in values.items() if not math.isfinite(v))
        skipped = values.get("nonfinite_skipped")
        grew = False
        if skipped is not None and math.isfinite(skipped):
            grew = skipped > self.last_skipped or (row.rows_seen == 1 and skipped > 0)
            self.last_skipped = skipped
        if not self.fires("nonfinite", bool(bad) or grew, step, patience=1):
            return []
        evidence: dict[str, Any] = {"keys": bad[:20]}
        if skipped is not None:
            evidence["nonfinite_skipped"] = skipped
        what = ", ".join(bad[:5]) + ("..." if len(bad) > 5 else "") if bad else (
            "the train step (updates skipped by the guard)")
        return [event(
            step, "nonfinite",
            f"Non-finite values (NaN or inf) at step {step}: {what}.",
            "Lower the learning rates (generator_lr, critic_lr), keep compute_dtype float32, "
            "check the data for NaN/inf, and restart from the last good checkpoint.",
            **evidence,
        )]


class GradientNorms(Rule):
    """Exploding critic/generator gradient norms (against their running medians) and a
    vanishing generator gradient (against the highest median it reached)."""

    def __init__(self, cfg: Mapping) -> None:
        super().__init__(cfg)
        self.peaks: dict[str, float] = {}

    def check(self, row: Row) -> list[dict]:
        events = [e for key in ("grad_norm/critic", "grad_norm/generator")
                  for e in self._exploding(row, key)]
        return events + self._vanishing(row)

    def _exploding(self, row: Row, key: str) -> list[dict]:
        cfg, step, x = self.cfg, row.step, row.values.get(key)
        if x is None or not math.isfinite(x):
            return []
        med = self.median(key)
        ref = med.median()
        ready = row.warmed_up and ref is not None and len(med) >= self.baseline_rows
        high = x > cfg["explode_abs"] or (ready and x > cfg["explode_factor"] * ref)
        events = []
        if self.fires("exploding_gradients:" + key, high, step):
            net = key.split("/")[1]
            events.append(event(
                step, "exploding_gradients",
                f"The {net} gradient norm exploded at step {step}: {_fmt(x)}, "
                f"{_fmt(x / ref) if ref else 'inf'}x its recent median {_fmt(ref or 0.0)}.",
                f"Lower {net}_lr (e.g. halve it), make sure the critic has no BatchNorm, "
                "and consider gradient clipping; with the Wasserstein loss use the gradient "
                "penalty (penalty='gp') rather than weight clipping.",
                metric=key, value=x, running_median=ref,
            ))
        if not high:
            med.add(x)
            if ready or len(med) >= cfg["warmup"]:
                self.peaks[key] = max(self.peaks.get(key, 0.0), med.median() or 0.0)
        return events

    def _vanishing(self, row: Row) -> list[dict]:
        cfg, step, x = self.cfg, row.step, row.values.get("grad_norm/generator")
        if x is None or not math.isfinite(x):
            return []
        peak = self.peaks.get("grad_norm/generator")
        low = x < cfg["vanish_abs"] or (
            row.warmed_up and peak is not None and x < cfg["vanish_factor"] * peak)
        if not self.fires("vanishing_gradients", low, step):
            return []
        return [event(
            step, "vanishing_gradients",
            f"The generator's gradient norm collapsed to {_fmt(x)} at step {step} "
            f"(its typical level was {_fmt(peak or 0.0)}): the generator has stopped "
            "learning.",
            "The critic is likely saturated: use the Wasserstein loss with gradient "
            "penalty (loss='wasserstein', penalty='gp'), or the non-saturating logistic "
            "loss; lower critic_lr or n_critic; check for dead ReLUs in the generator.",
            metric="grad_norm/generator", value=x, typical=peak,
        )]


class CriticOverpowering(Rule):
    """Logistic, hinge and relativistic losses: the critic loss near zero while the generator
    loss climbs above its earlier median (or the critic's `d_fake` is near zero)."""

    def check(self, row: Row) -> list[dict]:
        cfg, step, values = self.cfg, row.step, row.values
        d_loss = values.get("critic_loss")
        g_loss = values.get("generator_loss")
        if d_loss is None or g_loss is None or not (
                math.isfinite(d_loss) and math.isfinite(g_loss)):
            return []
        med = self.median("generator_loss")
        ref = med.median()
        low_d = d_loss < cfg["overpower_critic_loss"]
        d_fake = values.get("d_fake")
        rising = (ref is not None and len(med) >= cfg["warmup"]
                  and g_loss > cfg["overpower_generator_rise"] * max(abs(ref), 1e-3))
        fooled_never = d_fake is not None and d_fake < cfg["overpower_d_fake"]
        condition = row.warmed_up and low_d and (rising or fooled_never)
        events = []
        if self.fires("discriminator_overpowering", condition, step):
            events.append(event(
                step, "discriminator_overpowering",
                f"The discriminator overpowered the generator at step {step}: critic loss "
                f"{_fmt(d_loss)} (near zero) while the generator loss rose to {_fmt(g_loss)} "
                f"(from a median of {_fmt(ref or math.nan)}). The generator gets almost no "
                "useful gradient, so samples get worse.",
                "Switch the critic to the Wasserstein loss with gradient penalty "
                "(loss='wasserstein', penalty='gp'); or lower critic_lr / n_critic, remove "
                "BatchNorm from the critic, and roll back to the checkpoint before this step.",
                critic_loss=d_loss, generator_loss=g_loss, generator_loss_median=ref,
                d_real=values.get("d_real"), d_fake=d_fake,
            ))
        if not condition and not self.episodes["discriminator_overpowering"].active:
            med.add(g_loss)
        return events


class WassersteinGrowth(Rule):
    """The Wasserstein loss: the running median of `|wasserstein_estimate|` far above its
    lowest level (tracked from the second window of rows on) and still rising."""

    def __init__(self, cfg: Mapping) -> None:
        super().__init__(cfg)
        self.history: deque[float] = deque(maxlen=2 * int(cfg["window"]) + 1)
        self.floor = math.inf

    def check(self, row: Row) -> list[dict]:
        cfg, step, values = self.cfg, row.step, row.values
        w = values.get("wasserstein_estimate")
        if w is None or not math.isfinite(w):
            return []
        # Medians over the last `window` rows; the floor is tracked only after two windows so
        # the critic's normal initial rise never counts as growth.
        window = int(cfg["window"])
        med = self.median("wasserstein")
        med.add(abs(w))
        medians = self.history
        medians.append(cast(float, med.median()))  # it holds a value now
        if len(medians) < 2 * window:
            return []
        cur, before = medians[-1], medians[-1 - window]
        floor = self.floor = min(self.floor, cur)
        growing = (cur > cfg["wasserstein_min"] and cur > before
                   and cur > cfg["wasserstein_growth"] * max(floor, 1e-6))
        if not self.fires("discriminator_overpowering", growing, step):
            return []
        return [event(
            step, "discriminator_overpowering",
            f"The Wasserstein estimate keeps growing ({_fmt(w)} at step {step}, a running "
            f"median {_fmt(cur / max(floor, 1e-6))}x its lowest level {_fmt(floor)}): the "
            "critic is no longer held Lipschitz and outruns the generator.",
            "Use or strengthen the gradient penalty (penalty='gp', raise penalty_weight, the "
            "paper uses 10), remove BatchNorm from the critic, or lower critic_lr.",
            wasserstein_estimate=w, running_median=cur, lowest_median=floor,
            gradient_penalty=values.get("gradient_penalty"),
        )]


def penalty_balance(w: float | None, target: float, weight: float | None) -> float | None:
    """The interpolate norm a soft penalty of weight lambda balances at, given the critic's
    Wasserstein estimate `w` (module docstring); None without a weight or an estimate."""
    if w is None or not math.isfinite(w) or weight is None or not weight > 0:
        return None
    return (target + math.sqrt(target * target + 2 * abs(w) / weight)) / 2


class PenaltyOffTarget(Rule):
    """Penalty "gp"/"lp": the interpolates' gradient norm away from its target ("lp": above
    only) for `penalty_patience` rows, beyond what the Wasserstein estimate explains."""

    def __init__(self, cfg: Mapping, penalty: str, target: float, weight: float | None) -> None:
        super().__init__(cfg)
        self.penalty, self.target, self.weight = penalty, float(target), weight

    def check(self, row: Row) -> list[dict]:
        step, values = row.step, row.values
        x = values.get("input_grad_norm/interp_mean")
        if x is None or not math.isfinite(x):
            return []
        target, tol = self.target, self.cfg["penalty_tolerance"]
        if self.weight is not None and 0 < self.weight < 1:
            tol = tol / self.weight  # a weak penalty (e.g. the toy setting's 0.1) holds loosely
        balance = penalty_balance(values.get("wasserstein_estimate"), target, self.weight)
        high = x > target + tol and (balance is None or x > balance + self.cfg["penalty_tolerance"])
        off = high or (self.penalty == "gp" and x < target - tol)
        if not self.fires("penalty_off_target", off and row.warmed_up, step,
                          patience=self.cfg["penalty_patience"]):
            return []
        explained = ("" if balance is None else
                     f", and above the {_fmt(balance)} that the critic's Wasserstein "
                     "estimate explains")
        if x > target:
            advice = ("Raise penalty_weight (lambda; the WGAN-GP paper uses 10) or lower "
                      "critic_lr so the critic stays near 1-Lipschitz.")
            where = "above"
        else:
            advice = ("The critic is too flat: raise n_critic or critic_lr, or lower "
                      "penalty_weight; with small lambda (as in the toy setting) a norm "
                      "below 1 can be acceptable.")
            where = "below"
        return [event(
            step, "penalty_off_target",
            f"The critic's gradient norm at interpolates has stayed {where} its target "
            f"{_fmt(target)}{explained if x > target else ''} for "
            f"{self.cfg['penalty_patience']} logged steps (now {_fmt(x)}).",
            advice, interp_mean=x, interp_max=values.get("input_grad_norm/interp_max"),
            target=target, penalty=self.penalty,
            **({"balanced_norm": balance} if balance is not None else {}),
        )]


_COLLAPSE_ADVICE = ("Mode collapse: prefer the Wasserstein loss with gradient penalty, raise "
                    "n_critic, lower generator_lr, and roll back to a checkpoint from before it.")


class ModeCollapse(Rule):
    """`diversity` fell (or never rose) below `diversity_min`, or `eval/modes` dropped below
    `modes_drop` times its best."""

    def __init__(self, cfg: Mapping) -> None:
        super().__init__(cfg)
        self.best: dict[str, float] = {}
        self.low_diversity_rows = 0

    def check(self, row: Row) -> list[dict]:
        return self._diversity(row) + self._modes(row)

    def _diversity(self, row: Row) -> list[dict]:
        cfg, step, d = self.cfg, row.step, row.values.get("diversity")
        if d is None or not math.isfinite(d):
            return []
        best = self.best.get("diversity", d)
        if row.warmed_up:  # the warm-up rows show the random initialisation's spread
            best = self.best["diversity"] = max(best, d)
        low = d < cfg["diversity_min"]
        self.low_diversity_rows = self.low_diversity_rows + 1 if low else 0
        fell = low and d < cfg["diversity_drop"] * best
        never = (low and best < cfg["diversity_min"]
                 and self.low_diversity_rows >= 3 * int(cfg["window"]))
        if not self.fires("mode_collapse:diversity", row.warmed_up and (fell or never), step):
            return []
        what = (f"fell to {_fmt(d)} of the real data's at step {step} (highest "
                f"{_fmt(best)})" if fell else
                f"has stayed below {_fmt(cfg['diversity_min'])} of the real data's for "
                f"{self.low_diversity_rows} logged steps (now {_fmt(d)}, never above "
                f"{_fmt(best)})")
        return [event(
            step, "mode_collapse",
            f"Sample diversity {what}: the generator is producing near-identical samples.",
            _COLLAPSE_ADVICE, diversity=d, threshold=cfg["diversity_min"], highest=best,
        )]

    def _modes(self, row: Row) -> list[dict]:
        step, m = row.step, row.values.get("eval/modes")
        if m is None or not math.isfinite(m):
            return []
        best = self.best.get("eval/modes", m)
        self.best["eval/modes"] = max(best, m)
        if not self.fires("mode_collapse:modes", m < self.cfg["modes_drop"] * best, step,
                          patience=1):
            return []
        return [event(
            step, "mode_collapse",
            f"Captured modes dropped to {_fmt(m)} at step {step} (best {_fmt(best)}).",
            _COLLAPSE_ADVICE, modes=m, best_modes=best,
        )]


class EvalRegression(Rule):
    """An `eval/*` score worse than its best by more than `eval_tolerance` (relative) for
    `eval_patience` evaluations; the evidence names the best step for a rollback."""

    def __init__(self, cfg: Mapping) -> None:
        super().__init__(cfg)
        self.best: dict[str, tuple[float, int]] = {}

    def check(self, row: Row) -> list[dict]:
        step, events = row.step, []
        for key, x in row.values.items():
            if not is_eval_score(key) or not math.isfinite(x):
                continue
            best = self.best.get(key)
            if best is None or is_better(key, x, best[0]):
                self.best[key] = (x, step)
                best = (x, step)
            scale = max(abs(best[0]), 1e-12)
            worse = (x - best[0]) / scale if lower_is_better(key) else (best[0] - x) / scale
            if self.fires("eval_regression:" + key, worse > self.cfg["eval_tolerance"], step,
                          patience=self.cfg["eval_patience"]):
                events.append(event(
                    step, "eval_regression",
                    f"{key} got worse: {_fmt(x)} at step {step}, against its best {_fmt(best[0])} "
                    f"at step {best[1]} ({100 * worse:.0f}% worse).",
                    f"Roll back to the checkpoint at step {best[1]} (best {key}); to continue, "
                    "lower the learning rates or use lr_schedule='linear', and consider "
                    "early_stopping.patience.",
                    metric=key, value=x, best=best[0], best_step=best[1],
                ))
        return events


class LossSpikes(Rule):
    """`critic_loss` (and, except for the Wasserstein loss, `generator_loss`) more than
    `spike_factor` robust deviations away from its recent median."""

    def __init__(self, cfg: Mapping, loss: str) -> None:
        super().__init__(cfg)
        # The Wasserstein critic has a free offset, so its generator loss (-mean score of
        # fakes) drifts freely; only the critic loss (a difference of means) is checked there.
        self.keys = ("critic_loss",) if loss == "wasserstein" else (
            "critic_loss", "generator_loss")

    def check(self, row: Row) -> list[dict]:
        step, events = row.step, []
        for key in self.keys:
            x = row.values.get(key)
            if x is None or not math.isfinite(x):
                continue
            med = self.median(key)
            ref, mad = med.median(), med.mad()
            spike = False
            if row.warmed_up and ref is not None and len(med) >= self.baseline_rows:
                scale = max(1.4826 * cast(float, mad), 1e-2 * abs(ref), 1e-6)
                spike = abs(x - ref) > self.cfg["spike_factor"] * scale
            if self.fires("loss_spike:" + key, spike, step, patience=1):
                events.append(event(
                    step, "loss_spike",
                    f"{key} spiked to {_fmt(x)} at step {step} (recent median {_fmt(ref)}).",
                    "A single spike is usually harmless; if they recur, lower the learning "
                    "rates, raise penalty_weight, or check the data for outliers.",
                    metric=key, value=x, running_median=ref, mad=mad,
                ))
            med.add(x)  # a lasting level shift is absorbed by the median and ends the episode
        return events


class DeadOrSaturatedUnits(Rule):
    """`dead_units/*` above `dead_max` or `saturated/*` above `saturated_max`."""

    def check(self, row: Row) -> list[dict]:
        cfg, step, events = self.cfg, row.step, []
        for key, x in row.values.items():
            if not math.isfinite(x):
                continue
            if key.startswith("dead_units/"):
                if self.fires("dead_units:" + key, x > cfg["dead_max"], step):
                    events.append(event(
                        step, "dead_units",
                        f"{100 * x:.0f}% of the units in {key.split('/', 1)[1]} are dead (ReLU "
                        f"output zero for the whole batch) at step {step}.",
                        "Lower the learning rate of that network, use LeakyReLU, or check the "
                        "initialisation and input scaling.",
                        metric=key, value=x, threshold=cfg["dead_max"],
                    ))
            elif key.startswith("saturated/"):
                if self.fires("saturation:" + key, x > cfg["saturated_max"], step):
                    events.append(event(
                        step, "saturation",
                        f"{100 * x:.0f}% of the {key.split('/', 1)[1]}'s tanh outputs are "
                        f"saturated (|y| > 0.99) at step {step}; its gradients vanish there.",
                        "Check that the data is scaled to [-1, 1], lower generator_lr, and "
                        "keep BatchNorm in the generator.",
                        metric=key, value=x, threshold=cfg["saturated_max"],
                    ))
        return events


def default_rules(
    cfg: Mapping,
    *,
    loss: str = "wasserstein",
    penalty: str = "gp",
    penalty_target: float = 1.0,
    penalty_weight: float | None = None,
) -> list[Rule]:
    """The rules a run of this loss and penalty gets, in the order their events come out."""
    rules: list[Rule] = [NonFinite(cfg), GradientNorms(cfg)]
    overpowering = (CriticOverpowering if loss in ("logistic", "hinge", "rpgan")
                    else WassersteinGrowth)
    rules.append(overpowering(cfg))
    if penalty in ("gp", "lp"):
        rules.append(PenaltyOffTarget(cfg, penalty, penalty_target, penalty_weight))
    rules += [ModeCollapse(cfg), EvalRegression(cfg), LossSpikes(cfg, loss),
              DeadOrSaturatedUnits(cfg)]
    return rules


def _values(row: Mapping) -> dict[str, float]:
    """The row's numeric signals (bookkeeping keys and non-numbers left out, null as NaN)."""
    values: dict[str, float] = {}
    for key, raw in row.items():
        if key in _IGNORED_KEYS:
            continue
        x = _number(raw)
        if x is not None:
            values[key] = x
    return values


class HealthMonitor:
    """Feeds each metrics row to the health rules (`default_rules`, a list of `Rule` objects each
    owning its state); see the module docstring for the rules.

    `config` holds thresholds (missing keys take `default_health_config()` values); `loss`,
    `penalty`, `penalty_target` and `penalty_weight` are the run's config values, which decide
    which rules apply and how tight the penalty rule is (pass `penalty_weight`; None means 1).
    """

    def __init__(
        self,
        config: Mapping | None = None,
        *,
        loss: str = "wasserstein",
        penalty: str = "gp",
        penalty_target: float = 1.0,
        penalty_weight: float | None = None,
    ) -> None:
        cfg = default_health_config()
        cfg.update({k: v for k, v in dict(config or {}).items() if k in cfg})
        self.cfg = cfg
        self.rules = default_rules(cfg, loss=loss, penalty=penalty,
                                   penalty_target=penalty_target, penalty_weight=penalty_weight)
        self.rows_seen = 0
        self.last_step = 0

    @property
    def warmed_up(self) -> bool:
        """Whether more rows than `config.health.warmup` have been seen."""
        return self.rows_seen > self.cfg["warmup"]

    def update(self, row: Mapping) -> list[dict]:
        """Feeds one metrics row; returns the events that start at this row."""
        if not self.cfg.get("enabled", True):
            return []
        step = int(row.get("step", self.last_step))
        self.last_step = step
        values = _values(row)
        self.rows_seen += 1
        seen = Row(step, values, self.rows_seen, self.warmed_up)
        return [e for rule in self.rules for e in rule.check(seen)]

    def active(self) -> dict[str, int | None]:
        """Episodes still ongoing: rule key -> step where it started."""
        return {k: v for rule in self.rules for k, v in rule.active().items()}


def format_event(event: Mapping) -> str:
    """One line for the training log: `step N [rule] message Advice: ...`."""
    text = f"step {event.get('step')} [{event.get('rule')}] {event.get('message', '')}".strip()
    if event.get("advice"):
        text += f" Advice: {event['advice']}"
    return text


def analyse(
    rows: Iterable[Mapping],
    config: Mapping | None = None,
    loss: str = "wasserstein",
    penalty: str = "gp",
    penalty_target: float = 1.0,
    penalty_weight: float | None = None,
) -> list[dict]:
    """Replays a metrics stream through a fresh `HealthMonitor`; returns all events.

    Rows are taken in the order given, which should be the order they were written: after an
    in-run rollback, steps go back and the retried steps follow the abandoned ones.
    """
    monitor = HealthMonitor(config, loss=loss, penalty=penalty, penalty_target=penalty_target,
                            penalty_weight=penalty_weight)
    events: list[dict] = []
    for row in rows:
        events.extend(monitor.update(row))
    return events
