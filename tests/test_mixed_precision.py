"""bfloat16 compute: finite, float32 params and optimizer state, close to a float32 run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate


def _run(dtype: str, iters: int = 10):
    c = get_config_schema()
    c.model.width = 64
    c.global_batch_size = 64
    c.compute_dtype = dtype
    mesh = make_mesh()
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, 0, False), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    rng = np.random.default_rng(0)
    history = []
    for _ in range(iters):
        real = rng.normal(size=(c.n_critic, c.global_batch_size, *shape)).astype(np.float32)
        state, metrics = step(state, jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
        history.append({k: float(v) for k, v in metrics.items()})
    return state, history


def test_bfloat16_is_finite_and_close_to_float32():
    s32, h32 = _run("float32")
    s16, h16 = _run("bfloat16")
    for leaf in jax.tree.leaves((s16.g_params, s16.d_params, s16.g_opt_state, s16.d_opt_state)):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert leaf.dtype == jnp.float32
            assert bool(jnp.all(jnp.isfinite(leaf)))
    for row in h16:
        assert all(np.isfinite(v) for v in row.values()), row
    a = np.concatenate([np.ravel(x) for x in jax.tree.leaves((s32.g_params, s32.d_params))])
    b = np.concatenate([np.ravel(x) for x in jax.tree.leaves((s16.g_params, s16.d_params))])
    assert np.linalg.norm(a - b) / np.linalg.norm(a) < 2e-2
    for key in ("wasserstein_estimate", "gradient_penalty"):
        assert abs(h32[-1][key] - h16[-1][key]) < 0.1 * max(1.0, abs(h32[-1][key])), key
