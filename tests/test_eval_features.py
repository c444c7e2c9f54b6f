"""Evaluation says which features it runs on, refuses what it cannot compute, scores RGB and RGBA
digits on the channel that carries the digit, and one ranking rule serves checkpoints, early
stopping and `diagnose`."""

from __future__ import annotations

import importlib.util
import json
import math
import os

import numpy as np
import pytest
from conftest import REPO, run_module

from wgan_jax import checkpoint as ckpt
from wgan_jax import diagnose, evaluators, policies
from wgan_jax.config import apply_overrides, get_config_schema, validate_config
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import ConfigError
from wgan_jax.eval_plan import eval_plan, metric_names
from wgan_jax.metrics import ranking


def _plan(config):
    return eval_plan(config, num_classes(DataSpec.from_config(config)))

FEATURE_NAMES = ("fid", "kid", "precision", "recall", "density", "coverage")


def _config(dataset: str, channels: int = 1, **kw):
    c = get_config_schema()
    c.dataset, c.num_channels, c.image_size = dataset, channels, 8
    c.model.kind = "dcgan"
    apply_overrides(c, kw)
    return c


def _validate(config, num_devices: int) -> None:
    """What the trainer checks before anything is written: the values, then the plan."""
    validate_config(config, num_devices)
    eval_plan(config, num_classes(DataSpec.from_config(config)))


# ---- the plan: which features, which names, what is refused --------------------------------

@pytest.mark.parametrize("dataset, channels, features, kind, space", [
    ("digits", 1, "auto", "digits", "digits"),
    ("digits", 3, "auto", "digits", "digits"),
    ("digits", 4, "auto", "digits", "digits"),
    ("stacked_digits", 3, "auto", "stacked", "digits"),
    ("tfds:mnist", 1, "digits", "digits", "digits"),
    ("folder:/grey", 1, "digits", "digits", "digits"),
])
def test_plan_names_carry_the_feature_space(dataset, channels, features, kind, space):
    plan = eval_plan(_config(dataset, channels, eval_every=10,
                             **{"eval.features": features}), 0)
    assert (plan.kind, plan.features) == (kind, space)
    assert {f"eval/{m}_{space}" for m in FEATURE_NAMES} <= set(plan.names)
    assert "eval/fid" not in plan.names and plan.metric == f"eval/fid_{space}"
    assert "on hidden features of the 8x8 digit classifier" in plan.description


def test_plan_with_inception_weights(tmp_path):
    weights = tmp_path / "pt_inception.npz"
    weights.write_bytes(b"")
    plan = eval_plan(_config("folder:/rgb", 3, eval_every=10,
                             **{"eval.inception_weights": str(weights)}), 0)
    assert plan.kind == "inception" and plan.metric == "eval/fid_inception"
    assert "eval/is" in plan.names and "Inception pool3 features" in plan.description
    stacked = eval_plan(_config(
        "stacked_digits", 3, eval_every=10,
        **{"eval.inception_weights": str(weights), "eval.features": "inception"}), 0)
    assert stacked.kind == "stacked" and stacked.metric == "eval/fid_inception"
    assert {"eval/modes", "eval/kl", "eval/is"} <= set(stacked.names)
    auto_on_digits = eval_plan(_config(
        "digits", 1, eval_every=10, **{"eval.inception_weights": str(weights)}), 0)
    assert auto_on_digits.features == "digits"


@pytest.mark.parametrize("dataset, channels, extra, key", [
    # auto on one-channel non-digits data: no silent digit-classifier "FID"
    ("tfds:mnist", 1, {}, "config.eval_every"),
    ("folder:/grey", 1, {}, "config.eval_every"),
    ("folder:/rgb", 3, {}, "config.eval_every"),
    ("digits", 1, {"eval.features": "none"}, "config.eval_every"),
    ("folder:/rgb", 3, {"eval.features": "digits"}, "config.eval.features"),
    ("folder:/rgb", 3, {"eval.features": "inception"}, "config.eval.features"),
    ("toy:ring8", 1, {"eval.features": "digits", "model.kind": "mlp"}, "config.eval.features"),
    ("folder:/rgb", 3, {"eval.inception_weights": "/no/such.pth"},
     "config.eval.inception_weights"),
    ("digits", 1, {"eval.metric": "w1"}, "config.eval.metric"),
    ("digits", 1, {"eval.features": "clip"}, "config.eval.features"),
])
def test_impossible_evaluation_is_a_config_error(dataset, channels, extra, key):
    config = _config(dataset, channels, eval_every=10, **extra)
    with pytest.raises(ConfigError) as info:
        _validate(config, 1)
    message = str(info.value)
    assert message.startswith(key + ":") and "\n" not in message


def test_nothing_computable_is_allowed_when_evaluation_is_off():
    _validate(_config("tfds:mnist", 1, eval_every=0), 1)
    _validate(_config("folder:/rgb", 3, eval_every=0), 1)


def test_eval_metric_by_name_resolves_to_the_feature_metric():
    plan = eval_plan(_config("digits", 1, eval_every=10, **{"eval.metric": "kid"}), 0)
    assert plan.metric == "eval/kid_digits"


def _load_config_file(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "configs", name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def test_tpu_cifar10_config_is_valid_and_needs_weights_to_evaluate():
    config = _load_config_file("tpu_cifar10.py")
    _validate(config, 8)
    config.eval_every = 5000  # what it used to say, with no weights: silently a no-op before
    with pytest.raises(ConfigError, match="^config.eval_every:"):
        _validate(config, 8)


@pytest.mark.slow
def test_cli_refuses_auto_on_mnist_in_one_line_and_writes_nothing(tmp_path):
    workdir = tmp_path / "run"
    result = run_module(["wgan_jax.main", "--config=configs/mnist.py", f"--workdir={workdir}",
                         "--config.eval_every=100", f"--config.data_dir={tmp_path / 'data'}"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.eval_every" in lines[0], result.stderr
    assert not workdir.exists() and not (tmp_path / "data").exists()


# ---- RGB and RGBA digits are scored on the channel that carries the digit -----------------

@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")  # the digit classifier is trained and cached once


@pytest.fixture(scope="module")
def halves():
    """Two disjoint halves of the digits (held-out split) in every channel layout, in [-1, 1]."""
    from wgan_jax.data import digits
    from wgan_jax.data.images import to_float

    perm = np.random.default_rng(0).permutation(1797)
    out = {}
    for channels in (1, 3, 4):
        images = to_float(np.asarray(digits.digits_source(8, channels).images))
        out[channels] = images[perm[:800]], images[perm[800:1600]]
    return out


def _evaluator(channels, reference, data_dir):
    config = _config("digits", channels, eval_every=10, data_dir=str(data_dir),
                     **{"eval.num_samples": 800})
    return evaluators.make_evaluator(evaluators.EvalSpec.from_config(config),
                                     lambda n, seed: reference[:n], kid_subsets=10)


@pytest.mark.parametrize("channels", [3, 4])
def test_rgb_and_rgba_digits_score_like_their_grey_digits(channels, halves, data_dir):
    grey_ev = _evaluator(1, halves[1][0], data_dir)
    ev = _evaluator(channels, halves[channels][0], data_dir)
    real = ev(halves[channels][1])
    assert set(real) == set(ev.metric_names()) and all(map(math.isfinite, real.values()))
    # Independent reference: the same digits as one grey channel give the same numbers.
    grey = grey_ev(halves[1][1])
    assert real == pytest.approx(grey, rel=1e-4, abs=1e-6)
    # Real held-out digits are close to the reference; noise is far.
    noise = ev(np.random.default_rng(1).uniform(-1, 1, halves[channels][1].shape)
               .astype(np.float32))
    assert real["eval/fid_digits"] < 2.0 and real["eval/fid_digits"] * 20 < noise["eval/fid_digits"]
    assert real["eval/precision_digits"] > 0.5 and noise["eval/precision_digits"] < 0.05


def test_rgba_digits_are_judged_by_their_alpha_channel(halves, data_dir):
    reference, held_out = halves[4]
    ev = _evaluator(4, reference, data_dir)
    rng = np.random.default_rng(2)
    recoloured = held_out.copy()  # colours scrambled, ink kept: still the same digits
    recoloured[..., :3] = rng.uniform(-1, 1, held_out[..., :3].shape)
    no_ink = held_out.copy()  # colours kept, ink replaced by noise: not digits
    no_ink[..., 3] = rng.uniform(-1, 1, held_out[..., 3].shape)
    assert ev(recoloured) == pytest.approx(ev(held_out))
    assert ev(no_ink)["eval/fid_digits"] > 20 * ev(held_out)["eval/fid_digits"]


@pytest.mark.slow
def test_rgba_digits_training_evaluates_with_named_features(tmp_path, data_dir, caplog):
    from wgan_jax.train import train_and_evaluate

    config = _config(
        "digits", 4, eval_every=1, num_iterations=2, global_batch_size=16, n_critic=1,
        log_every=1, sample_every=0, plot_every=0, checkpoint_every=0, data_dir=str(data_dir),
        **{"model.kind": "mlp", "model.width": 32, "model.depth": 1, "model.z_dim": 8,
           "eval.num_samples": 200, "diagnostics.level": "off"})
    workdir = tmp_path / "run"
    with caplog.at_level("INFO", logger="wgan_jax"):
        summary = train_and_evaluate(config, str(workdir))
    start = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation of")]
    assert len(start) == 1 and "alpha (ink) channel" in start[0] and "eval/fid_digits" in start[0]
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert [r["step"] for r in evals] == [1, 2]
    names = {f"eval/{m}_digits" for m in FEATURE_NAMES}
    for row in evals:  # every evaluation row names its feature space, and is finite
        keys = {k for k in row if k.startswith("eval/")}
        assert keys == names, keys
        assert all(math.isfinite(row[k]) for k in keys)
    # An untrained generator is far from real digits (real held-out digits score < 2).
    assert evals[-1]["eval/fid_digits"] > 10
    assert summary["best"]["metric"] == "eval/fid_digits"


# ---- one ranking rule for the checkpointer, early stopping and diagnose -------------------

# Each metric is best at a different step, and the first evaluation's FID is not finite: a
# checkpointer or diagnose that ranked by another order, or chose among finite values only,
# would name another metric or another step.
EVALS = {
    1: {"eval/fid_digits": math.inf, "eval/kid_digits": 0.5, "eval/precision_digits": 0.9,
        "eval/coverage_digits": 0.1},
    2: {"eval/fid_digits": 9.0, "eval/kid_digits": 0.1, "eval/precision_digits": 0.2,
        "eval/coverage_digits": 0.2},
    3: {"eval/fid_digits": 4.0, "eval/kid_digits": 0.3, "eval/precision_digits": 0.3,
        "eval/coverage_digits": 0.3},
    4: {"eval/fid_digits": 6.0, "eval/kid_digits": 0.4, "eval/precision_digits": 0.4,
        "eval/coverage_digits": 0.9},
}


@pytest.mark.parametrize("wanted, metric, step", [
    ("", "eval/fid_digits", 3),
    ("kid", "eval/kid_digits", 2),
    ("eval/precision_digits", "eval/precision_digits", 1),
])
def test_checkpointer_and_diagnose_pick_the_same_best(tmp_path, wanted, metric, step):
    import jax.numpy as jnp

    workdir = str(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"eval": {"metric": wanted}}))
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for s, values in EVALS.items():
            f.write(json.dumps({"step": s, "critic_loss": 0.0, **values}) + "\n")
    # The trainer hands the checkpointer the eval plan's metric.
    plan = eval_plan(_config("digits", 1, **{"eval.metric": wanted}), 0)
    c = ckpt.Checkpointer(workdir, keep=10, best_metric=plan.metric)
    for s, values in EVALS.items():
        c.save(s, {"w": jnp.full((2,), float(s))}, {"position": s}, values)
    c.wait()
    best = c.best()
    c.close()
    report = diagnose.diagnose(workdir)["best_eval"]
    assert ranking.choose_metric(EVALS[1], wanted) == metric
    assert best == {"step": step, "metric": metric, "value": EVALS[step][metric]}
    assert (report["metric"], report["step"], report["checkpoint"]) == (metric, step, step)
    # Early stopping and the evaluator rank by the same metric and direction.
    ev = evaluators.Evaluator(_plan(_config("digits", 1,
                                                         **{"eval.metric": wanted})), [])
    assert ev.metric == metric
    early = policies.make_early_stopping(plan.metric, patience=1, eval_every=1)
    assert early.lower_is_better == ranking.lower_is_better(metric)


def test_ranking_rule():
    assert ranking.split_name("eval/fid_inception") == ("fid", "inception")
    assert ranking.split_name("eval/reverse_kl") == ("reverse_kl", "")
    assert ranking.lower_is_better("eval/fid_digits") and ranking.lower_is_better("kid_inception")
    assert not ranking.lower_is_better("eval/precision_digits")
    assert not ranking.lower_is_better("eval/coverage_inception")
    names = metric_names("stacked", "digits")
    assert ranking.choose_metric(names) == "eval/fid_digits"
    assert ranking.choose_metric(names, "modes") == "eval/modes"
    assert ranking.choose_metric(names, "fid_inception") == ""
    assert ranking.choose_metric(["eval/kid_std", "eval/w1"]) == "eval/w1"
    assert ranking.choose_metric(["eval/zeta", "eval/alpha"]) == "eval/alpha"
    assert ranking.choose_metric(["eval/fid_digits", "eval/fid_inception"]) == \
        "eval/fid_inception"
