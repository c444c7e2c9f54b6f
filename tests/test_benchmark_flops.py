"""The speed benchmark's FLOP count: the unrolled critic loop is the same step, counted fully."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import load_repo_file
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate

pytestmark = pytest.mark.slow  # every test here compiles train steps: over 2 s each


def _bench_module():
    return load_repo_file("benchmarks/train_step.py")


def _setup(n_critic: int):
    c = get_config_schema()
    c.dataset = "toy:8gaussians"
    c.model.width = 32
    c.global_batch_size = 16
    c.n_critic = n_critic
    mesh = make_mesh()
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, 0, False), mesh)
    real = np.random.default_rng(0).normal(size=(n_critic, 16, *shape)).astype(np.float32)
    real = jax.device_put(real, NamedSharding(mesh, P(None, "data")))
    return c, mesh, gan, shape, state, real


def test_unrolled_step_computes_the_same_update():
    c, mesh, gan, shape, state, real = _setup(3)
    rolled, _ = make_train_step(StepConfig.from_config(c), mesh, gan)(state, real)
    _, _, _, _, state, real = _setup(3)
    unrolled, _ = make_train_step(
        StepConfig.from_config(c), mesh, gan, unroll_critic=True
    )(state, real)
    for a, b in zip(jax.tree.leaves(rolled), jax.tree.leaves(unrolled), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_flops_count_every_critic_update():
    bench = _bench_module()
    counts = {}
    for n in (2, 3, 4):
        c, mesh, gan, shape, state, real = _setup(n)
        rolled = bench.count_flops(
            make_train_step(StepConfig.from_config(c), mesh, gan), state, real
        )
        unrolled = bench.count_flops(
            make_train_step(StepConfig.from_config(c), mesh, gan, unroll_critic=True), state, real
        )
        counts[n] = (rolled, unrolled)
    per_critic = counts[3][1] - counts[2][1]
    assert per_critic > 0
    np.testing.assert_allclose(
        counts[4][1] - counts[3][1], per_critic, rtol=0.05, err_msg=str(counts)
    )
    # The loop form is counted once whatever n_critic is: why the benchmark unrolls.
    assert counts[4][0] < counts[4][1] - 2 * per_critic
