"""Each health rule fires once on a synthetic stream with its problem; healthy streams are quiet."""

import gzip
import json
import math
import os

import numpy as np
import pytest

from wgan_jax import health

N = 200
BAD = 100  # the problem starts at this row
STEP = 10  # steps between rows


def healthy_rows(loss="wasserstein", seed=0, n=N):
    """A noisy but healthy metrics stream, with eval rows every 20 rows."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        step = i * STEP
        noise = rng.normal(size=12)
        row = {"step": step}
        if loss == "logistic":
            row.update(critic_loss=1.2 + 0.1 * noise[0], generator_loss=0.9 + 0.1 * noise[1],
                       d_real=0.6 + 0.03 * noise[2], d_fake=0.4 + 0.03 * noise[3])
        else:
            w = 0.5 + 1.5 * math.exp(-i / 30) + 0.05 * noise[0]
            row.update(critic_loss=-w + 0.01, generator_loss=0.3 + 0.1 * noise[1],
                       wasserstein_estimate=w, gradient_penalty=0.01 * abs(noise[2]))
        row.update({
            "grad_norm/critic": float(np.exp(0.3 * noise[4])),
            "grad_norm/generator": 0.2 * float(np.exp(0.3 * noise[5])),
            "input_grad_norm/interp_mean": 1.0 + 0.1 * noise[6],
            "input_grad_norm/interp_max": 1.5 + 0.1 * noise[7],
            "dead_units/generator": 0.05, "saturated/generator": 0.01,
            "diversity": 1.0 + 0.05 * noise[8], "nonfinite_skipped": 0,
        })
        rows.append(row)
        if i % 20 == 19:
            rows.append({"step": step, "eval/fid": 50.0 / (1 + i / 40) + noise[9],
                         "eval/modes": min(25, 10 + i // 10)})
    return rows


def train_rows(rows):
    return [r for r in rows if "critic_loss" in r]


def rules(events):
    return [e["rule"] for e in events]


@pytest.mark.parametrize("loss", ["wasserstein", "logistic", "hinge"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_stream_is_quiet(loss, seed):
    rows = healthy_rows("logistic" if loss == "hinge" else loss, seed)
    assert health.analyse(rows, health.default_health_config(), loss, "gp") == []


def test_event_shape_and_monitor_streaming():
    rows = healthy_rows()
    rows[150]["critic_loss"] = None
    monitor = health.HealthMonitor({}, loss="wasserstein", penalty="gp")
    events = [e for row in rows for e in monitor.update(row)]
    assert rules(events) == ["nonfinite"]
    event = events[0]
    assert set(event) == {"step", "rule", "message", "advice", "evidence"}
    assert event["step"] == rows[150]["step"] and event["evidence"]["keys"] == ["critic_loss"]
    assert "NaN" in event["message"] and event["advice"]


def test_nonfinite_fires_once_per_episode_and_rearms():
    rows = train_rows(healthy_rows())
    for i in (50, 51, 52, 120):
        rows[i]["generator_loss"] = math.inf
    rows[160]["nonfinite_skipped"] = 3
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert [(e["rule"], e["step"]) for e in events] == [
        ("nonfinite", 500), ("nonfinite", 1200), ("nonfinite", 1600)]


def test_exploding_gradients():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["grad_norm/critic"] *= 1000.0
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert rules(events) == ["exploding_gradients"]
    assert events[0]["step"] == (BAD + 2) * STEP  # patience 3
    assert events[0]["evidence"]["metric"] == "grad_norm/critic"


def test_vanishing_gradients():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["grad_norm/generator"] = 1e-6 * (1 + 0.1 * (i % 3))
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert rules(events) == ["vanishing_gradients"]
    assert events[0]["step"] == (BAD + 2) * STEP


@pytest.mark.parametrize("loss", ["logistic", "rpgan"])
def test_dcgan_discriminator_overpowering(loss):
    """The issue's case: D loss -> 0.01 while G loss jumps from 6 to 45 (the relativistic
    pairing loss saturates the same way: softplus terms near 0 for the critic)."""
    rows = train_rows(healthy_rows("logistic"))
    for i, row in enumerate(rows):
        row["generator_loss"] = 6.0 + 0.3 * math.sin(i)
        row["critic_loss"] = 0.3 + 0.02 * math.cos(i)
        if i >= BAD:
            row["critic_loss"] = 0.01
            row["generator_loss"] = 6.0 + 39.0 * min(1.0, (i - BAD) / 10)
            row["d_real"], row["d_fake"] = 0.995, 0.005
    events = health.analyse(rows, {}, loss, "none")
    assert "discriminator_overpowering" in rules(events)
    event = next(e for e in events if e["rule"] == "discriminator_overpowering")
    assert event["step"] >= BAD * STEP
    assert "wasserstein" in event["advice"].lower()
    assert rules(events).count("discriminator_overpowering") == 1


def test_wasserstein_estimate_growing_without_bound():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["wasserstein_estimate"] = 0.5 * 1.05 ** (i - BAD)
    events = health.analyse(rows, {}, "wasserstein", "clip")
    assert rules(events) == ["discriminator_overpowering"]
    assert events[0]["step"] > BAD * STEP


def test_penalty_off_target_only_for_gp_and_lp():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["input_grad_norm/interp_mean"] = 3.0
    for penalty in ("gp", "lp"):
        events = health.analyse(rows, {}, "wasserstein", penalty)
        assert rules(events) == ["penalty_off_target"]
        assert events[0]["step"] == (BAD + 9) * STEP  # penalty_patience 10
        assert "penalty_weight" in events[0]["advice"]
    assert health.analyse(rows, {}, "wasserstein", "r1") == []
    low = train_rows(healthy_rows())
    for i in range(BAD, N):
        low[i]["input_grad_norm/interp_mean"] = 0.2
    assert rules(health.analyse(low, {}, "wasserstein", "gp")) == ["penalty_off_target"]
    assert health.analyse(low, {}, "wasserstein", "lp") == []  # one-sided


def test_mode_collapse_from_diversity_and_modes():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["diversity"] = 0.1
    assert rules(health.analyse(rows, {}, "wasserstein", "gp")) == ["mode_collapse"]
    rows = healthy_rows()
    evals = [r for r in rows if "eval/modes" in r]
    for r in evals[6:]:
        r["eval/modes"] = 8
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert rules(events) == ["mode_collapse", "eval_regression"]
    assert events[0]["evidence"]["best_modes"] == 21


def test_eval_regression_names_best_step_for_rollback():
    rows = healthy_rows()
    evals = [r for r in rows if "eval/fid" in r]
    for r in evals[5:]:
        r["eval/fid"] = 80.0
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert rules(events) == ["eval_regression"]
    best_step = evals[4]["step"]
    assert events[0]["evidence"]["best_step"] == best_step
    assert f"step {best_step}" in events[0]["advice"]


def test_loss_spike_fires_per_spike():
    rows = train_rows(healthy_rows())
    rows[80]["critic_loss"] = 50.0
    rows[150]["critic_loss"] = -80.0
    events = health.analyse(rows, {}, "wasserstein", "gp")
    assert [(e["rule"], e["step"]) for e in events] == [("loss_spike", 800), ("loss_spike", 1500)]


def test_dead_and_saturated_units():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["dead_units/generator"] = 0.8
        rows[i]["saturated/generator"] = 0.9
    assert sorted(rules(health.analyse(rows, {}, "wasserstein", "gp"))) == [
        "dead_units", "saturation"]


def test_config_thresholds_and_disable():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["dead_units/generator"] = 0.8
    assert health.analyse(rows, {"dead_max": 0.9}, "wasserstein", "gp") == []
    assert health.analyse(rows, {"enabled": False}, "wasserstein", "gp") == []
    defaults = health.default_health_config()
    assert all(isinstance(v, (int, float, bool)) for v in defaults.values())


def test_weak_penalty_gets_proportionally_more_slack():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["input_grad_norm/interp_mean"] = 2.2  # typical of lambda = 0.1 on toy data
    assert rules(health.analyse(rows, {}, "wasserstein", "gp")) == ["penalty_off_target"]
    assert health.analyse(rows, {}, "wasserstein", "gp", penalty_weight=0.1) == []
    for i in range(BAD, N):
        rows[i]["input_grad_norm/interp_mean"] = 20.0
    assert rules(health.analyse(rows, {}, "wasserstein", "gp", penalty_weight=0.1)) == [
        "penalty_off_target"]


def test_format_event_is_one_line():
    rows = train_rows(healthy_rows())
    rows[150]["critic_loss"] = math.nan
    (event,) = health.analyse(rows, {}, "wasserstein", "gp")
    line = health.format_event(event)
    assert line.startswith("step 1500 [nonfinite] Non-finite") and "Advice: " in line
    assert "\n" not in line


def test_wasserstein_generator_loss_drift_is_not_a_spike():
    rows = train_rows(healthy_rows())
    for i in range(BAD, N):
        rows[i]["generator_loss"] += 40.0  # the critic's offset moved
    assert health.analyse(rows, {}, "wasserstein", "gp") == []
    assert "loss_spike" in rules(health.analyse(rows, {}, "hinge", "gp"))


def test_eval_spreads_are_not_scores():
    rows = healthy_rows()
    for j, r in enumerate(r for r in rows if "eval/fid" in r):
        r["eval/is_std"] = 1.0 if j < 3 else 0.01
    assert health.analyse(rows, {}, "wasserstein", "gp") == []
    assert health.is_eval_score("eval/fid") and not health.is_eval_score("eval/kid_std")


def test_a_fresh_generator_spreading_out_is_not_a_collapse():
    """Diversity starts low (random init), dips, then rises: quiet. Stuck low for 3 windows:
    fires ("never spread out"). A fall from a reached level: fires ("fell")."""
    rows = train_rows(healthy_rows())
    for i, r in enumerate(rows):
        r["diversity"] = 0.35 if i < 3 else 0.21 if i < 30 else min(1.0, 0.21 + 0.03 * (i - 30))
    assert health.analyse(rows, {}, "wasserstein", "gp") == []
    for r in rows:
        r["diversity"] = 0.2
    (event,) = health.analyse(rows, {}, "wasserstein", "gp")
    assert event["rule"] == "mode_collapse" and "has stayed below" in event["message"]
    assert event["step"] == (3 * 20 + 1) * STEP  # 3 windows of low rows, then patience 3
    for i, r in enumerate(rows):
        r["diversity"] = 0.45 if i < 40 else 0.3
    (event,) = health.analyse(rows, {}, "wasserstein", "gp")
    assert "fell to 0.3" in event["message"] and event["step"] == 42 * STEP  # patience 3


def test_penalty_norm_explained_by_the_wasserstein_estimate_is_on_target():
    """A soft penalty balances at k (k - 1) = W / (2 lambda): a critic there is not off target
    (the 64 px WGAN-GP row: norm 3.07 at W 138.8, lambda 10); far above it is."""
    k = health.penalty_balance(138.81, target=1.0, weight=10.0)
    assert k == pytest.approx((1 + math.sqrt(1 + 27.762)) / 2)
    assert k * (k - 1) == pytest.approx(138.81 / 20)
    rows = train_rows(healthy_rows())
    for i, r in enumerate(rows):
        r["wasserstein_estimate"] = 138.81  # level from the start: no growth to flag
        if i >= BAD:
            r["input_grad_norm/interp_mean"] = 3.07
    assert health.analyse(rows, {}, "wasserstein", "gp", penalty_weight=10.0) == []
    for i in range(BAD, N):
        rows[i]["input_grad_norm/interp_mean"] = 4.0
    (event,) = health.analyse(rows, {}, "wasserstein", "gp", penalty_weight=10.0)
    assert event["rule"] == "penalty_off_target"
    assert event["evidence"]["balanced_norm"] == pytest.approx(k)
    for r in rows:
        del r["wasserstein_estimate"]  # nothing explains the norm: the plain tolerance
    rows = [dict(r, **{"input_grad_norm/interp_mean": 3.07}) if i >= BAD else r
            for i, r in enumerate(rows)]
    assert rules(health.analyse(rows, {}, "wasserstein", "gp", penalty_weight=10.0)) == [
        "penalty_off_target"]


def _fixture_cases() -> list[dict]:
    path = os.path.join(os.path.dirname(__file__), "fixtures", "health_events.json.gz")
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("case", range(6))
def test_the_events_of_the_code_before_are_reproduced_word_for_word(case):
    """Streams with every kind of problem (tests/fixtures/make_health_fixture.py), replayed: the
    same events in the same order, with the same words and evidence, and the same episodes
    still open, as the monitor of the time gave (made by that code; issue 25)."""
    c = _fixture_cases()[case]
    monitor = health.HealthMonitor(c["thresholds"], loss=c["loss"], penalty=c["penalty"],
                                   penalty_target=1.0, penalty_weight=c["penalty_weight"])
    events = [e for row in c["rows"] for e in monitor.update(row)]
    assert json.loads(json.dumps(events)) == c["events"]
    assert monitor.active() == c["active"] and monitor.rows_seen == c["rows_seen"]


def test_the_fixture_covers_every_rule():
    fired = {e["rule"] for c in _fixture_cases() for e in c["events"]}
    assert fired == {"nonfinite", "exploding_gradients", "vanishing_gradients",
                     "discriminator_overpowering", "penalty_off_target", "mode_collapse",
                     "eval_regression", "loss_spike", "dead_units", "saturation"}


def test_rules_own_their_state_and_compose_in_a_list():
    """Each rule fed the stream alone gives exactly its share of the monitor's events: no rule
    depends on another's state. The list follows the loss and the penalty."""
    c = _fixture_cases()[0]
    cfg = {**health.default_health_config(), **c["thresholds"]}
    kw = dict(loss=c["loss"], penalty=c["penalty"], penalty_weight=c["penalty_weight"])
    together = [type(rule) for rule in health.default_rules(cfg, **kw)]
    assert together == [health.NonFinite, health.GradientNorms, health.WassersteinGrowth,
                        health.PenaltyOffTarget, health.ModeCollapse, health.EvalRegression,
                        health.LossSpikes, health.DeadOrSaturatedUnits]
    shares = []
    for index in range(len(together)):
        monitor = health.HealthMonitor(c["thresholds"], **kw)
        monitor.rules = [monitor.rules[index]]
        shares.append([e for row in c["rows"] for e in monitor.update(row)])
    by_row = sorted((e for share in shares for e in share),
                    key=lambda e: [json.dumps(x) for x in c["events"]].index(json.dumps(e)))
    assert json.loads(json.dumps(by_row)) == c["events"] and all(shares)
    logistic = health.default_rules(cfg, loss="logistic", penalty="r1")
    assert health.CriticOverpowering in map(type, logistic)
    assert health.PenaltyOffTarget not in map(type, logistic)
