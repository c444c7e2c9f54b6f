"""The training loop's policies (`wgan_jax.policies`): which actions and which checkpoints follow
each iteration, the divergence guard, early stopping; and a short run through the loop."""

from __future__ import annotations

import json
import os

import pytest

from wgan_jax import checkpoint as ckpt
from wgan_jax import train
from wgan_jax.config import get_config_schema
from wgan_jax.policies import (
    EARLY_STOP,
    END,
    EVALUATION,
    PERIODIC,
    STOP,
    DivergenceGuard,
    EarlyStopping,
    Schedule,
    due_actions,
    make_early_stopping,
)
from wgan_jax.runs import abstract_train_state, build_gan
from wgan_jax.step import make_mesh

# ---- due_actions: the one rule -------------------------------------------------------------


def _due(step, stopping=False, evaluating=True, is_main=True, early_stop=False, **overrides):
    c = get_config_schema()
    c.num_iterations, c.log_every, c.sample_every, c.plot_every = 10, 4, 5, 0
    c.eval_every, c.checkpoint_every = 3, 6
    for key, value in overrides.items():
        c[key] = value
    return due_actions(Schedule.from_config(c), step, stopping=stopping, evaluating=evaluating,
                       is_main=is_main, early_stop=early_stop)


def test_periodic_actions():
    steps = range(1, 11)
    assert [s for s in steps if _due(s).log] == [4, 8, 10]  # and the last iteration
    assert [s for s in steps if _due(s).guard] == [4, 8, 10]
    assert [s for s in steps if _due(s).sample] == [5, 10]
    assert not any(_due(s).plot for s in steps)  # plot_every=0: never in the loop
    assert [s for s in steps if _due(s).evaluate] == [3, 6, 9, 10]
    assert not any(_due(s).stop for s in steps)


def test_which_checkpoint_follows_each_iteration():
    steps = range(1, 11)
    # Every evaluation is followed by a checkpoint (it competes for best.json); step 6 is
    # also periodic, and its checkpoint carries the evaluation's metrics.
    assert {s: _due(s).checkpoint for s in steps if _due(s).checkpoint} == {
        3: EVALUATION, 6: EVALUATION, 9: EVALUATION, 10: END}
    alone = {s: _due(s, evaluating=False).checkpoint for s in steps}
    assert {s: why for s, why in alone.items() if why} == {6: PERIODIC, 10: END}
    assert {s: _due(s, checkpoint_every=0, eval_every=0).checkpoint for s in (6, 10)} == {
        6: "", 10: END}
    # Only a periodic checkpoint waits while updates are skipped as non-finite.
    assert [s for s in steps if _due(s, evaluating=False).deferrable] == [6]
    assert not _due(10).deferrable and not _due(3).deferrable


@pytest.mark.parametrize("step", [1, 5, 6, 9, 10])
def test_a_stop_signal_saves_and_ends_the_loop_at_any_step(step):
    due = _due(step, stopping=True)
    assert due.checkpoint == STOP and due.stop and not due.deferrable


def test_an_early_stop_saves_and_ends_the_loop():
    due = _due(9, early_stop=True)
    assert due.checkpoint == EARLY_STOP and due.stop and due.evaluate
    assert _due(10, early_stop=True).checkpoint == EARLY_STOP  # also on the last iteration


def test_a_stop_logs_a_row_that_does_not_feed_the_guard_and_evaluates_nothing():
    due = _due(5, stopping=True)
    assert due.log and not due.guard and not due.evaluate
    assert not _due(6, stopping=True).evaluate


def test_only_the_main_process_draws_and_without_evaluator_nothing_is_evaluated():
    assert not _due(5, is_main=False).sample and not _due(8, is_main=False, plot_every=4).plot
    assert _due(8, plot_every=4).plot
    assert not _due(3, evaluating=False).evaluate
    # Every process saves the same checkpoints (a collective), main or not.
    assert [_due(s, is_main=False).checkpoint for s in (3, 10)] == [EVALUATION, END]


# ---- the divergence guard --------------------------------------------------------------------


def _config(**overrides):
    c = get_config_schema()
    for key, value in overrides.items():
        c[key] = value
    return c


def _guard_keys() -> dict:
    """The guard's settings in the default config."""
    c = _config()
    return {"max_consecutive_nonfinite": c.max_consecutive_nonfinite,
            "loss_explosion_factor": c.loss_explosion_factor}


def test_guard_rules_and_bookkeeping():
    guard = DivergenceGuard(max_consecutive_nonfinite=3, loss_explosion_factor=10.0)
    for loss in (-1.0, -1.2, -0.9, -1.1, -1.0):
        assert guard.check({"critic_loss": loss, "nonfinite_consecutive": 0.0}) is None
    reason, evidence = guard.check({"critic_loss": -50.0, "nonfinite_consecutive": 0.0})
    assert "exploded" in reason and evidence["running_median_abs"] == 1.0
    assert guard.check({"critic_loss": -5.0, "nonfinite_consecutive": 2.0}) is None
    reason, _ = guard.check({"critic_loss": float("nan"), "nonfinite_consecutive": 3.0})
    assert reason.startswith("3 consecutive non-finite")
    guard.lr_scale, guard.rollbacks = 0.25, 2
    restored = DivergenceGuard(**_guard_keys())
    restored.load({"position": 7, "guard": guard.state()})
    assert restored.state() == guard.state()
    off = DivergenceGuard(**_guard_keys())  # loss_explosion_factor = 0: off
    for loss in (-1.0, -1.0, -1.0, -1.0, -1.0, -1e6):
        assert off.check({"critic_loss": loss, "nonfinite_consecutive": 0.0}) is None


def test_guard_loads_a_data_item_written_before_it_had_its_own_key():
    guard = DivergenceGuard(**_guard_keys())
    guard.load({"position": 3, "lr_scale": 0.5})
    assert guard.state() == {"lr_scale": 0.5, "rollbacks": 0, "losses": []}


# ---- early stopping ------------------------------------------------------------------------


def test_early_stopping_lower_is_better():
    es = EarlyStopping(patience=2, lower_is_better=True)
    assert [es.update(v) for v in (5.0, 4.0, 4.5, 3.0, 3.5, float("nan"))] == [
        False, False, False, False, False, True]
    assert es.best == 3.0


def test_early_stopping_higher_is_better_and_patience_zero():
    es = EarlyStopping(patience=1, lower_is_better=False)
    assert es.update(0.5) is False and es.update(0.7) is False and es.update(0.6) is True
    never = EarlyStopping(patience=0)
    assert not any(never.update(v) for v in (1.0, 2.0, 3.0, 4.0))


def test_early_stopping_state_round_trips_through_json():
    a = EarlyStopping(patience=3)
    for v in (2.0, 1.0, 1.5):
        a.update(v)
    b = EarlyStopping(patience=3)
    b.set_state(json.loads(json.dumps(a.get_state())))
    assert b.get_state() == a.get_state()
    assert [a.update(v) for v in (1.2, 1.1)] == [b.update(v) for v in (1.2, 1.1)] == [False, True]
    fresh = EarlyStopping(patience=3)
    fresh.set_state(None)
    assert fresh.best is None and fresh.bad_evaluations == 0


def test_make_early_stopping_follows_the_metric_and_the_config():
    assert make_early_stopping("eval/w1", patience=0, eval_every=100) is None  # patience 0: off
    assert make_early_stopping("", patience=2, eval_every=100) is None  # no evaluator
    es = make_early_stopping("eval/modes", patience=2, eval_every=100)
    assert es.lower_is_better is False and es.patience == 2  # modes: higher is better
    assert make_early_stopping("eval/w1", patience=2, eval_every=100).lower_is_better is True
    assert make_early_stopping("eval/modes", patience=2, eval_every=0) is None  # evaluation off


# ---- a short run through the loop ------------------------------------------------------------

TOY = {"dataset": "toy:ring8", "num_iterations": 24, "global_batch_size": 32, "n_critic": 1,
       "model.width": 16, "model.depth": 2, "log_every": 4, "checkpoint_every": 5,
       "keep_checkpoints": 10, "sample_every": 8, "plot_every": 0, "eval_every": 4,
       "eval.num_samples": 200, "early_stopping.patience": 1, "diagnostics.level": "off"}


def _toy_config(**overrides):
    c = get_config_schema()
    for key, value in {**TOY, **overrides}.items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c


def _rows(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [{k: v for k, v in r.items() if k != "steps_per_second"} for r in rows]


@pytest.mark.slow
def test_an_early_stopped_run_saves_its_last_evaluation_and_pictures_change_no_number(tmp_path):
    """Early stopping ends the loop with a checkpoint of the evaluation that asked for it
    (holding the early-stopping state); `pictures=False` draws nothing and changes nothing
    else: the same rows, checkpoints and best.json."""
    drawn, plain = str(tmp_path / "drawn"), str(tmp_path / "plain")
    summary = train.train_and_evaluate(_toy_config(), drawn)
    again = train.train_and_evaluate(_toy_config(), plain, pictures=False)
    assert summary["early_stopped"] and summary["stopped_early"]
    stop = summary["step"]
    assert stop % TOY["eval_every"] == 0 and stop < TOY["num_iterations"]
    evaluations = [r for r in _rows(drawn) if "eval/w1" in r]
    assert evaluations[-1]["step"] == stop
    reader = ckpt.Checkpointer(drawn, read_only=True)
    try:
        steps = reader.all_steps()
        _, data, step = reader.restore(
            abstract_train_state(build_gan(_toy_config()), _toy_config(), make_mesh()))
    finally:
        reader.close()
    evals = [s for s in range(4, stop + 1, 4)]
    assert steps == sorted(set(evals) | set(range(5, stop, 5)))
    assert step == stop and data["early_stopping"]["bad_evaluations"] == 1
    assert summary["best"] == again["best"] and summary["best"]["metric"] == "eval/w1"

    assert {k: again[k] for k in ("step", "early_stopped", "best")} == {
        k: summary[k] for k in ("step", "early_stopped", "best")}
    assert _rows(plain) == _rows(drawn)
    assert sorted(os.listdir(os.path.join(drawn, "samples")))[-1] == f"step_{stop:07d}.png"
    assert not os.path.exists(os.path.join(plain, "samples"))
    assert not os.path.exists(os.path.join(plain, "plots"))
    with open(os.path.join(drawn, "checkpoints", "best.json")) as f, \
            open(os.path.join(plain, "checkpoints", "best.json")) as g:
        assert json.load(f) == json.load(g)
