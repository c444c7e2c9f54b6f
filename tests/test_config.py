"""The config schema and `validate_config`: every key's values are checked in one line naming
the key; the schema's choice names agree with the modules that use them; and validation is the
schema's alone (what needs the data or the evaluation's plan is checked next, by the trainer).
"""

from __future__ import annotations

import glob
import os

import ml_collections
import pytest
from conftest import REPO, load_repo_file

from wgan_jax import augment, health, precision
from wgan_jax import config as schema
from wgan_jax.config import apply_overrides, check_schema, get_config_schema, validate_config
from wgan_jax.data import toy
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.default_config import get_config as default_config
from wgan_jax.errors import ConfigError, DataError
from wgan_jax.eval_plan import eval_plan

NAN, INF = float("nan"), float("inf")

# (key, bad value): each is refused by validate_config with a line naming the key.
NUMERIC_CASES = [
    ("seed", -1), ("seed", 2**31), ("penalty_target", NAN), ("penalty_target", -1.0),
    ("rollback_lr_factor", NAN), ("rollback_lr_factor", 0.0), ("rollback_lr_factor", 1.5),
    ("max_rollbacks", -1), ("loss_explosion_factor", -INF), ("loss_explosion_factor", 0.5),
    ("loss_explosion_factor", INF), ("max_consecutive_nonfinite", -1),
    ("early_stopping.patience", -2), ("generator_lr", NAN), ("critic_lr", INF),
    ("penalty_weight", NAN), ("clip_value", -INF), ("dragan_scale", NAN),
    ("instance_noise", NAN), ("health.window", 0), ("health.patience", -1),
    ("health.explode_factor", NAN), ("health.spike_factor", -1.0), ("health.dead_max", INF),
    ("sampling.jacobian_truncation", 1.0), ("sampling.jacobian_truncation", -0.1),
    ("sampling.jacobian_truncation", NAN), ("faults.peer_timeout_seconds", 0),
    ("faults.peer_timeout_seconds", 4), ("faults.peer_timeout_seconds", 3601),
    ("faults.peer_timeout_seconds", True), ("faults.watchdog.seconds", -1.0),
    ("faults.watchdog.seconds", NAN), ("faults.watchdog.seconds", INF),
    ("faults.watchdog.factor", 0.5), ("faults.watchdog.factor", NAN),
]


@pytest.mark.parametrize("key, value", NUMERIC_CASES, ids=[f"{k}={v}" for k, v in NUMERIC_CASES])
def test_every_numeric_key_is_validated(key, value):
    config = default_config()
    apply_overrides(config, {key: value})
    with pytest.raises(ConfigError, match=rf"^config\.{key}: "):
        validate_config(config, 1)


def test_eval_num_samples_is_validated_when_evaluation_is_on():
    config = default_config()
    config.eval.num_samples = 0
    validate_config(config, 1)  # evaluation off: the key is not used
    config.eval_every = 10
    with pytest.raises(ConfigError, match=r"^config\.eval\.num_samples: must be >= 10"):
        validate_config(config, 1)


def test_jacobian_truncation_is_refused_for_a_conditional_model():
    config = default_config()
    apply_overrides(config, {"model.conditional": "projection",
                             "sampling.jacobian_truncation": 0.1})
    with pytest.raises(ConfigError, match=r"^config\.sampling\.jacobian_truncation: is for "
                       "unconditional models"):
        validate_config(config, 1)


def test_every_shipped_config_still_validates():
    paths = sorted(glob.glob(os.path.join(REPO, "configs", "*.py")))
    assert paths
    for path in paths:
        config = load_repo_file(os.path.relpath(path, REPO)).get_config()
        validate_config(config, 1)
        eval_plan(config, num_classes(DataSpec.from_config(config)))


def test_a_config_file_must_return_the_schema():
    with pytest.raises(ConfigError, match="must return the schema's ConfigDict.*got a dict"):
        check_schema({"seed": 1}, "config file x.py")
    with pytest.raises(ConfigError, match="lacks config keys"):
        check_schema(ml_collections.ConfigDict({"seed": 1}), "config file x.py")
    check_schema(default_config(), "config file x.py")


def test_choice_names_are_those_of_the_modules_that_use_them():
    """The schema lists them without importing those modules (it stays a leaf)."""
    assert schema.TOY_MIXTURES == tuple(toy.MIXTURES)
    assert precision.PRECISIONS is schema.PRECISIONS
    assert augment.parse_policy is schema.parse_policy
    assert get_config_schema().health.to_dict() == health.default_health_config()
    assert set(schema.CHOICES["matmul_precision"]) == {"default", "high", "highest"}


@pytest.mark.parametrize("key, value, words", [
    ("loss", "wgan", "must be one of wasserstein, hinge, logistic, rpgan; got 'wgan'"),
    ("matmul_precision", "tf32", "must be one of default, high, highest; got 'tf32'"),
    ("augment", "color,blur", "unknown augmentation 'blur'; known: color, translation, cutout"),
    ("dataset", "toy:ring9", "unknown toy dataset 'ring9'; known: 8gaussians, 25gaussians, "
     "ring8, grid25, swissroll"),
])
def test_choices_are_refused_by_name(key, value, words):
    c = default_config()
    apply_overrides(c, {key: value})
    with pytest.raises(ConfigError) as info:
        validate_config(c, 1)
    assert str(info.value) == f"config.{key}: {words}"


def test_validation_reads_no_data_and_makes_no_plan(tmp_path):
    """A conditional tfds run whose data is absent and an evaluation that has nothing to compute
    pass `validate_config`; the class count and the plan then refuse them in one line."""
    c = get_config_schema()
    apply_overrides(c, {"dataset": "tfds:nosuchset", "image_size": 8, "model.kind": "dcgan",
                        "model.generator_norm": "batch", "model.conditional": "projection",
                        "data_dir": str(tmp_path)})
    validate_config(c, 1)
    with pytest.raises(DataError):
        num_classes(DataSpec.from_config(c))
    c = get_config_schema()
    apply_overrides(c, {"dataset": "folder:/rgb", "image_size": 8, "num_channels": 3,
                        "model.kind": "dcgan", "eval_every": 10})
    validate_config(c, 1)
    with pytest.raises(ConfigError, match=r"^config\.eval_every: 10, but nothing can be"):
        eval_plan(c, num_classes(DataSpec.from_config(c)))


def test_unknown_keys_are_named_with_the_closest_ones():
    assert schema.unknown_key_message("model.widht") == (
        "config.model.widht: no such config key (did you mean model.width, model.kind, "
        "model.depth?)")
    assert schema.unknown_override(["main", "--config.seed=1", "--config.sedd=2"]) == "sedd"
    assert schema.unknown_override(["main", "--config.seed=1"]) is None
    with pytest.raises(AttributeError):
        get_config_schema().no_such_key = 1  # locked: a typo in a config file fails at once
    assert isinstance(get_config_schema(), ml_collections.ConfigDict)
