"""`diagnostics.level`: off adds no statistics to the step's outputs; basic and full add more."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate

pytestmark = pytest.mark.slow  # every test here compiles train steps: over 2 s each

CORE = {"critic_loss", "generator_loss", "wasserstein_estimate", "gradient_penalty", "d_real",
        "d_fake", "nonfinite_skipped", "nonfinite_consecutive"}


def _metric_keys(level: str) -> set[str]:
    c = get_config_schema()
    c.model.width = 16
    c.global_batch_size = 16
    c.n_critic = 1
    c.diagnostics.level = level
    mesh = make_mesh()
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, 0, False), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    real = np.zeros((1, 16, 2), np.float32)
    _, metrics = step(state, jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
    return set(metrics)


def test_levels():
    off, basic, full = _metric_keys("off"), _metric_keys("basic"), _metric_keys("full")
    assert off == CORE
    assert {"grad_norm/critic", "grad_norm/generator", "input_grad_norm/interp_mean",
            "input_grad_norm/interp_max"} <= basic - off
    assert {"dead_units/generator", "diversity", "input_grad_norm/real_mean"} <= full - basic
    assert any(k.startswith("update_ratio/critic/") for k in full)
