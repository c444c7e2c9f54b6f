"""A short run on the reference 25 Gaussians learns: the samples reach most modes."""

from __future__ import annotations

import numpy as np
import pytest

from wgan_jax.config import get_config_schema
from wgan_jax.metrics import toy_mixture, toy_mode_metrics
from wgan_jax.runs import generate_samples, load_run
from wgan_jax.train import train_and_evaluate

pytestmark = pytest.mark.slow  # subprocesses or whole runs


def test_short_toy_25gaussians_run_covers_most_modes(tmp_path):
    c = get_config_schema()
    c.dataset = "toy:25gaussians"
    c.model.width = 128
    c.num_iterations = 500
    c.generator_lr = c.critic_lr = 1e-3
    c.lr_schedule = "linear"
    c.log_every = 100
    c.sample_every = c.plot_every = 0
    summary = train_and_evaluate(c, str(tmp_path))
    assert summary["step"] == 500
    _, gan, state, step = load_run(str(tmp_path))
    samples = generate_samples(gan, state, 2500, seed=0)
    centres, std = toy_mixture("25gaussians")
    result = toy_mode_metrics(samples, centres, std)
    # Measured: 15 modes. An untrained generator puts its samples in a blob near the origin
    # (0-2 modes); a step with a wrong sign or scale does not spread them over the grid.
    assert result["modes"] >= 12, result
    # ... and spread like the data (an untrained or broken generator stays near the origin)
    np.testing.assert_allclose(samples.std(0), centres.std(0), rtol=0.3)
