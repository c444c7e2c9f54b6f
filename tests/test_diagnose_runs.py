"""`diagnose` on real runs: it flags the classic DCGAN collapse and passes a healthy toy run."""

from __future__ import annotations

import json

import pytest
from conftest import run_module

pytestmark = pytest.mark.slow  # subprocesses or whole runs


def test_collapse_config_is_flagged_and_healthy_toy_run_passes(tmp_path):
    collapse, healthy = tmp_path / "collapse", tmp_path / "toy"
    result = run_module([
        "wgan_jax.main", "--config=configs/dcgan_collapse.py", f"--workdir={collapse}",
        "--config.image_size=16", "--config.num_iterations=120", "--config.log_every=5",
        "--config.diagnostics.level=basic", "--config.sample_every=0", "--config.plot_every=0",
        "--config.checkpoint_every=0",
    ])
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_module(["wgan_jax.diagnose", f"--workdir={collapse}", "--json"])
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert "discriminator_overpowering" in json.dumps(report), result.stdout[-3000:]

    result = run_module([
        "wgan_jax.main", "--config=configs/toy_25gaussians.py", f"--workdir={healthy}",
        "--config.model.width=64", "--config.num_iterations=300", "--config.log_every=10",
        "--config.sample_every=0", "--config.plot_every=0", "--config.checkpoint_every=0",
    ])
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_module(["wgan_jax.diagnose", f"--workdir={healthy}"])
    assert result.returncode == 0, result.stdout[-3000:]
