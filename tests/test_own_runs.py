"""A run trained from network objects opens again: `runs.load_run(workdir, generator=...,
critic=...)` samples and evaluates it, and the commands say in one line why they cannot."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import run_module
from own_nets import CaseNNXCritic, CaseNNXGenerator

from wgan_jax import runs
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.errors import UserError
from wgan_jax.train import train_and_evaluate


@pytest.mark.slow
def test_a_run_trained_from_nnx_objects_is_sampled_and_evaluated(tmp_path):
    config = get_config_schema()
    apply_overrides(config, {
        "dataset": "digits", "image_size": 8, "num_channels": 1, "global_batch_size": 16,
        "n_critic": 2, "num_iterations": 2, "sample_every": 0, "plot_every": 0,
        "model.z_dim": 8,
    })
    workdir = str(tmp_path / "run")
    train_and_evaluate(config, workdir, generator=CaseNNXGenerator(),
                       critic=CaseNNXCritic(norm=False))

    # Fresh objects of the same architecture: the weights come from the checkpoint.
    nets = {"generator": CaseNNXGenerator(), "critic": CaseNNXCritic(norm=False)}
    run = runs.load_run(workdir, **nets)
    assert run.step == 2
    samples = runs.generate_samples(run.gan, run.state, 5, seed=0)
    assert samples.shape == (5, 8, 8, 1) and np.all(np.isfinite(samples))
    report = runs.evaluate_run(workdir, num=50, **nets)
    assert report["step"] == 2 and report["metrics"]

    with pytest.raises(UserError) as error:
        runs.load_run(workdir, generator=nets["generator"])
    text = str(error.value)
    assert "\n" not in text and "critic passed as an object" in text
    assert "runs.load_run(workdir, critic=...)" in text

    result = run_module(["wgan_jax.sample", f"--workdir={workdir}", "--num=4",
                         f"--out={tmp_path / 's.npy'}"])
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "generator and critic passed as an object" in last
    assert "runs.load_run(workdir, generator=..., critic=...)" in last
    assert "unreadable" not in result.stderr and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "s.npy")
    result = run_module(["wgan_jax.evaluate", f"--workdir={workdir}", "--num=50"])
    assert result.returncode == 2, result.stderr[-2000:]
    assert "passed as an object" in result.stderr.strip().splitlines()[-1]
