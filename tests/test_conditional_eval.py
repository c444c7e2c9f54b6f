"""Evaluation of class-conditional runs: label accuracy and per-class FID on the digit classifier.

The "generators" here are fixed arrays of real digits: one that returns held-out digits of the
asked label, one that ignores the label. A 2-iteration conditional CLI run checks the metrics
reach metrics.jsonl.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from conftest import run_module

from wgan_jax import evaluators
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.errors import ConfigError
from wgan_jax.eval_plan import eval_plan
from wgan_jax.metrics import ranking
from wgan_jax.metrics.conditional import class_counts, draw_class_labels

CLASS_KEYS = {"eval/label_accuracy", "eval/fid_digits_class_mean", "eval/fid_digits_class_worst",
              "eval/fid_digits_class_worst_label"}
CONDITIONAL = {"dataset": "digits", "image_size": 8, "num_channels": 1, "model.kind": "mlp",
               "model.width": 16, "model.z_dim": 8, "model.conditional": "projection",
               "eval.num_samples": 1000}


def _config(**overrides):
    c = get_config_schema()
    apply_overrides(c, {**CONDITIONAL, **overrides})
    return c


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")  # the digit classifier is trained and cached once


@pytest.fixture(scope="module")
def split():
    """8 px digits as floats and labels, split as the digit classifier was (train, held-out)."""
    from wgan_jax.data.digits import digits_source
    from wgan_jax.data.images import to_float
    from wgan_jax.metrics.digits_classifier import train_test_split_indices

    source = digits_source(8, 1)
    images, labels = to_float(source.images), source.labels
    train, test = train_test_split_indices(len(labels))
    return (images[train], labels[train]), (images[test], labels[test])


@pytest.fixture(scope="module")
def evaluator(data_dir, split):
    """A conditional digits evaluator whose real reference is the classifier's train split."""
    (images, labels), _ = split
    frequencies = tuple(np.bincount(labels, minlength=10) / len(labels))
    return evaluators.make_evaluator(
        evaluators.EvalSpec.from_config(_config(data_dir=str(data_dir))),
        lambda n, seed: images, kid_subsets=10,
        reference_labels=lambda n, seed: labels, class_frequencies=frequencies)


def _held_out_of_class(split, labels, seed, ignore_label=False):
    """Held-out digits: of each asked label, or (ignoring the label) of any class."""
    _, (images, truth) = split
    rng = np.random.default_rng(seed)
    if ignore_label:
        return images[rng.integers(0, len(truth), len(labels))]
    return np.stack([images[rng.choice(np.flatnonzero(truth == k))] for k in labels])


def test_labels_follow_the_class_frequencies_and_the_seed():
    counts = class_counts((0.5, 0.25, 0.25, 0.0), 10)
    assert counts.tolist() == [5, 3, 2, 0] or counts.tolist() == [5, 2, 3, 0]
    assert counts.sum() == 10
    labels = draw_class_labels((0.1, 0.2, 0.7), 1000, seed=3)
    assert np.bincount(labels).tolist() == [100, 200, 700]
    np.testing.assert_array_equal(labels, draw_class_labels((0.1, 0.2, 0.7), 1000, seed=3))
    assert np.any(labels != draw_class_labels((0.1, 0.2, 0.7), 1000, seed=4))


def test_held_out_digits_of_the_asked_label_score_near_one(evaluator, split):
    labels = evaluator.sample_labels(1000, seed=0)
    out = evaluator(_held_out_of_class(split, labels, seed=1), labels)
    assert CLASS_KEYS <= set(out) == set(evaluator.metric_names())
    assert out["eval/label_accuracy"] > 0.95, out
    # Real held-out digits vs the real train digits of the same class: small (<= 5.5 each).
    assert out["eval/fid_digits_class_worst"] < 8.0, out
    assert out["eval/fid_digits_class_mean"] < 5.0, out


def test_a_generator_that_ignores_the_label_scores_near_chance(evaluator, split):
    labels = evaluator.sample_labels(1000, seed=0)
    out = evaluator(_held_out_of_class(split, labels, seed=1, ignore_label=True), labels)
    assert abs(out["eval/label_accuracy"] - 0.1) < 0.04, out
    assert out["eval/fid_digits_class_worst"] > 40.0, out  # some class is far off
    assert out["eval/fid_digits_class_mean"] > 25.0, out
    assert out["eval/fid_digits"] < 3.0, out  # the plain FID cannot see it: the marginal is right


def test_label_accuracy_is_read_class_by_class(data_dir, split):
    """All samples 3s, half of them asked for as 3s and half as 5s: accuracy about 1/2 (not
    the classifier's accuracy, not the class balance), and the 5s are the worst class."""
    (images, labels), (held_out, truth) = split
    ev = evaluators.make_evaluator(
        evaluators.EvalSpec.from_config(_config(data_dir=str(data_dir))),
        lambda n, seed: images, kid_subsets=2, reference_labels=lambda n, seed: labels,
        class_frequencies=(0.0,) * 3 + (0.5, 0.0, 0.5) + (0.0,) * 4)
    threes = held_out[truth == 3][:20]
    read = ev.classifier.predict(threes)
    out = ev(np.concatenate([threes, threes]), np.array([3] * 20 + [5] * 20, np.int32))
    expected = np.mean(np.concatenate([read == 3, read == 5]))
    assert out["eval/label_accuracy"] == pytest.approx(expected) and 0.4 < expected <= 0.5
    assert out["eval/fid_digits_class_worst_label"] == 5.0


def test_start_line_names_the_class_metrics_and_the_held_out_floor(data_dir, split, caplog):
    (images, labels), _ = split
    with caplog.at_level(logging.INFO, logger="wgan_jax"):
        evaluators.make_evaluator(
            evaluators.EvalSpec.from_config(_config(data_dir=str(data_dir))),
            lambda n, seed: images,
            reference_labels=lambda n, seed: labels, class_frequencies=(0.1,) * 10)
    line = caplog.records[-1].getMessage()
    assert "label accuracy by the digit classifier" in line and "eval/label_accuracy" in line
    accuracy = float(line.split("label accuracy ")[-1].rstrip("%"))
    assert 97.0 <= accuracy <= 99.5, line  # the classifier's held-out accuracy: 98.7%


@pytest.mark.parametrize("overrides, words", [
    ({"dataset": "tfds:mnist", "eval.features": "digits"},
     ["no classifier reads the classes of tfds:mnist"]),
])
def test_conditional_runs_without_a_digit_classifier_say_so(overrides, words):
    plan = eval_plan(_config(**overrides), 10)
    assert not plan.class_metrics and not CLASS_KEYS & set(plan.names)
    for word in words:
        assert word in plan.description, plan.description


def test_stacked_digits_label_accuracy(data_dir):
    """Conditional stacked_digits: label accuracy from the three per-channel digits (real
    triples score high against their own classes, ~0 against shifted ones); no per-class FID,
    and the start line says why."""
    from wgan_jax.data.digits import stacked_digits_classes, stacked_digits_source
    from wgan_jax.data.images import to_float

    config = _config(dataset="stacked_digits", num_channels=3, data_dir=str(data_dir),
                     **{"eval.num_samples": 500})
    plan = eval_plan(config, 1000)
    assert plan.stacked_labels and "eval/label_accuracy" in plan.names
    assert not (CLASS_KEYS - {"eval/label_accuracy"}) & set(plan.names)
    assert "no per-class FID: its 1000 classes" in plan.description
    source = stacked_digits_source(8)
    images = to_float(np.stack([source[i] for i in range(500)]))
    classes = stacked_digits_classes(source.labels[:500])
    ev = evaluators.make_evaluator(evaluators.EvalSpec.from_config(config),
                                   lambda n, seed: images, kid_subsets=5,
                                   class_frequencies=(1 / 1000,) * 1000)
    assert ev(images, classes)["eval/label_accuracy"] > 0.9
    assert ev(images, (classes + 1) % 1000)["eval/label_accuracy"] < 0.05
    with pytest.raises(ValueError, match="needs the label of every sample"):
        ev(images)


def test_too_few_samples_per_class_is_a_config_error(split):
    few = _config(**{"eval.num_samples": 999, "eval_every": 10})
    with pytest.raises(ConfigError, match=r"^config.eval.num_samples: 999, .* at least 100 "):
        eval_plan(few, 10)
    few.eval_every = 0  # not evaluating: no error until an evaluator is made (evaluate --num)
    eval_plan(few, 10)
    (images, labels), _ = split
    with pytest.raises(ConfigError, match=r"^config.eval.num_samples: 999, "):
        evaluators.make_evaluator(evaluators.EvalSpec.from_config(few), lambda n, seed: images,
                                  class_frequencies=(0.1,) * 10,
                                  reference_labels=lambda n, seed: labels)


def test_ranking_directions():
    assert not ranking.lower_is_better("eval/label_accuracy")
    assert ranking.lower_is_better("eval/fid_digits_class_mean")
    assert ranking.lower_is_better("eval/fid_digits_class_worst")
    assert not ranking.is_eval_score("eval/fid_digits_class_worst_label")
    names = eval_plan(_config(), 10).names
    assert ranking.choose_metric(names) == "eval/fid_digits"
    assert ranking.choose_metric(names, "label_accuracy") == "eval/label_accuracy"
    assert ranking.is_better("eval/label_accuracy", 0.97, 0.9)


@pytest.mark.slow
def test_cli_run_writes_the_class_metrics(tmp_path, data_dir):
    workdir = tmp_path / "run"
    result = run_module([  # the benchmark's config, shrunk
        "wgan_jax.main", "--config=configs/digits_conditional.py", f"--workdir={workdir}",
        "--config.num_iterations=2", "--config.model.width=16", "--config.global_batch_size=16",
        "--config.eval_every=2", "--config.eval.num_samples=1000", "--config.sample_every=0",
        "--config.plot_every=0", f"--config.data_dir={data_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "label accuracy by the digit classifier" in result.stderr
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/label_accuracy" in r]
    assert len(evals) == 1 and evals[0]["step"] == 2 and CLASS_KEYS <= set(evals[0])
    assert 0.0 <= evals[0]["eval/label_accuracy"] <= 1.0
