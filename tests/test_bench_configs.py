"""The speed table's configs build, and their FLOPs per iteration are what benchmarks/README.md
states (torch not needed).

XLA's cost analysis of each bench config's step (critic loop unrolled, as train_step.py counts
it) is read from the lowered program, without compiling: within 0.5% of the compiled count that
train_step.py reports and the README quotes, so a changed network, batch or n_critic (or a
rewrite that changes the FLOPs) fails it until the README says the new figure.
"""

from __future__ import annotations

import os
import re

import jax
import numpy as np
import pytest
from conftest import REPO, load_repo_file

from wgan_jax.config import data_shape
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan

MODELS = ("toy", "dcgan32", "dcgan64", "resnet32")


def _readme_gflop() -> dict[str, float]:
    """model -> GFLOP/iteration from the networks table of benchmarks/README.md."""
    with open(os.path.join(REPO, "benchmarks", "README.md")) as f:
        text = f.read()
    rows = re.findall(r"^\| (\w+) \|.*\| ([\d.]+) \|$", text, flags=re.M)
    return {model: float(gflop) for model, gflop in rows if model in MODELS}


@pytest.mark.parametrize("model", MODELS)
def test_bench_config_flops_are_the_readme_figure(model):
    bench = load_repo_file("benchmarks/train_step.py")
    config = load_repo_file(f"configs/bench_{model}.py").get_config()
    mesh = make_mesh(jax.devices()[:1])
    shape = data_shape(config)
    gan = build_gan(config)
    state = jax.eval_shape(lambda: create_train_state(gan, shape, 0, config.ema_decay > 0))
    real = jax.ShapeDtypeStruct((config.n_critic, config.global_batch_size, *shape), np.float32)
    step = make_train_step(StepConfig.from_config(config), mesh, gan, unroll_critic=True)
    flops = bench.count_flops(step, state, real, compiled=False)
    np.testing.assert_allclose(flops / 1e9, _readme_gflop()[model], rtol=0.01)
