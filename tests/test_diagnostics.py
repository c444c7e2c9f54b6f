"""wgan_jax.diagnostics against numpy on the same arrays, on one shard and across shards.

Cross-device collectives are exercised with `jax.vmap(..., axis_name=...)`, which gives
`psum`/`pmax`/`pmean` their multi-device meaning without needing several devices.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wgan_jax import diagnostics

rng = np.random.default_rng(0)


def _params():
    """A Flax-style variables dict: {"params": {module: {kernel, bias | scale}}}."""
    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    return {"params": {
        "Dense_0": {"kernel": normal(3, 8), "bias": normal(8)},
        "LayerNorm_0": {"scale": normal(8), "bias": normal(8)},
        "out": {"kernel": normal(8, 1), "bias": normal(1)},
    }}


def _np_norm(*arrays):
    return np.sqrt(sum(np.sum(np.asarray(a, np.float64) ** 2) for a in arrays))


def test_layer_norms_and_global_norm():
    params = _params()
    p = params["params"]
    norms = jax.jit(lambda t: diagnostics.layer_norms(t, "grad_norm/critic"))(params)
    assert set(norms) == {"grad_norm/critic/Dense_0", "grad_norm/critic/LayerNorm_0",
                          "grad_norm/critic/out"}
    np.testing.assert_allclose(norms["grad_norm/critic/Dense_0"],
                               _np_norm(p["Dense_0"]["kernel"], p["Dense_0"]["bias"]), rtol=1e-6)
    np.testing.assert_allclose(norms["grad_norm/critic/out"],
                               _np_norm(p["out"]["kernel"], p["out"]["bias"]), rtol=1e-6)
    leaves = jax.tree_util.tree_leaves(params)
    np.testing.assert_allclose(diagnostics.global_norm(params), _np_norm(*leaves), rtol=1e-6)
    total = np.sqrt(sum(float(v) ** 2 for v in norms.values()))
    np.testing.assert_allclose(total, _np_norm(*leaves), rtol=1e-6)
    assert float(diagnostics.global_norm({})) == 0.0
    nested = {"Block_0": {"Conv_0": {"kernel": jnp.ones((2, 2))}}, "scale": jnp.full((3,), 2.0)}
    assert {k: float(v) for k, v in diagnostics.layer_norms(nested, "g").items()} == {
        "g/Block_0/Conv_0": 2.0, "g/scale": pytest.approx(np.sqrt(12.0))}


def test_update_ratios():
    params = _params()
    updates = jax.tree_util.tree_map(lambda x: 1e-3 * jnp.ones_like(x), params)
    ratios = diagnostics.update_ratios(updates, params, "update_ratio/critic")
    p = params["params"]["Dense_0"]
    expected = _np_norm(1e-3 * np.ones(p["kernel"].shape), 1e-3 * np.ones(p["bias"].shape)) / (
        _np_norm(p["kernel"], p["bias"]))
    np.testing.assert_allclose(ratios["update_ratio/critic/Dense_0"], expected, rtol=1e-5)
    assert len(ratios) == 3


def _np_dead(act):
    act = np.asarray(act)
    alive = np.any(act > 0, axis=tuple(range(act.ndim - 1)))
    return 1.0 - alive.mean()


def test_dead_fraction_dense_conv_and_tree():
    dense = np.maximum(rng.normal(size=(16, 10)), 0).astype(np.float32)
    dense[:, [1, 4, 7]] = 0.0
    conv = np.maximum(rng.normal(size=(4, 5, 5, 6)), 0).astype(np.float32)
    conv[..., 2] = 0.0
    np.testing.assert_allclose(diagnostics.dead_fraction(dense), 0.3, atol=1e-7)
    np.testing.assert_allclose(diagnostics.dead_fraction(conv), _np_dead(conv), atol=1e-7)
    np.testing.assert_allclose(diagnostics.dead_fraction({"a": dense, "b": (conv,)}),
                               4 / 16, atol=1e-7)


def test_dead_fraction_is_exact_across_shards():
    act = np.maximum(rng.normal(size=(8, 12)) - 1.5, 0).astype(np.float32)
    act[:, 0] = 0.0
    act[7, 3] = 1.0  # unit 3 is alive on the last shard only
    act[:7, 3] = 0.0
    shards = act.reshape(4, 2, 12)
    per_device = jax.vmap(lambda a: diagnostics.dead_fraction(a, axis_name="data"),
                          axis_name="data")(shards)
    np.testing.assert_allclose(per_device, np.full(4, _np_dead(act)), atol=1e-7)
    local = jax.vmap(diagnostics.dead_fraction)(shards)
    assert not np.allclose(local, _np_dead(act))  # without the collective the answer differs


def test_saturated_fraction():
    y = np.tanh(3 * rng.normal(size=(8, 4, 4, 3))).astype(np.float32)
    expected = np.mean(np.abs(y) > 0.99)
    np.testing.assert_allclose(diagnostics.saturated_fraction(y), expected, atol=1e-7)
    np.testing.assert_allclose(diagnostics.saturated_fraction(y, threshold=0.5),
                               np.mean(np.abs(y) > 0.5), atol=1e-7)
    per_device = jax.vmap(lambda a: diagnostics.saturated_fraction(a, axis_name="d"),
                          axis_name="d")(y.reshape(4, 2, 4, 4, 3))
    np.testing.assert_allclose(per_device, np.full(4, expected), atol=1e-7)


def _np_mean_pdist(x):
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    n = len(x)
    return d.sum() / (n * (n - 1))


def test_pairwise_diversity_matches_numpy():
    real = rng.normal(size=(32, 6, 6, 3)).astype(np.float32)
    fake = (0.5 * rng.normal(size=(32, 6, 6, 3)) + 3.0).astype(np.float32)
    expected = _np_mean_pdist(fake) / _np_mean_pdist(real)
    np.testing.assert_allclose(diagnostics.pairwise_diversity(fake, real), expected,
                               rtol=1e-4)
    collapsed = np.repeat(fake[:1], 32, axis=0)
    assert float(diagnostics.pairwise_diversity(collapsed, real)) < 1e-3
    toy = rng.normal(size=(64, 2)).astype(np.float32)
    np.testing.assert_allclose(diagnostics.pairwise_diversity(toy, toy), 1.0, rtol=1e-5)


def test_pairwise_diversity_across_shards_is_mean_of_local_distances():
    real = rng.normal(size=(16, 2)).astype(np.float32)
    fake = rng.normal(size=(16, 2)).astype(np.float32) * 0.7
    per_device = jax.vmap(lambda f, r: diagnostics.pairwise_diversity(f, r, axis_name="data"),
                          axis_name="data")(fake.reshape(4, 4, 2), real.reshape(4, 4, 2))
    num = np.mean([_np_mean_pdist(s) for s in fake.reshape(4, 4, 2)])
    den = np.mean([_np_mean_pdist(s) for s in real.reshape(4, 4, 2)])
    np.testing.assert_allclose(per_device, np.full(4, num / den), rtol=1e-4)


SHARD_MAP = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import PartitionSpec as P
from wgan_jax import diagnostics

mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
rng = np.random.default_rng(1)
act = np.maximum(rng.normal(size=(8, 12)) - 1.5, 0).astype(np.float32)
act[:7, 3] = 0.0
act[7, 3] = 1.0
y = np.tanh(3 * rng.normal(size=(8, 5))).astype(np.float32)
fake = rng.normal(size=(8, 3)).astype(np.float32)
real = rng.normal(size=(8, 3)).astype(np.float32)

def f(a, t, fk, rl):
    return (diagnostics.dead_fraction(a, axis_name="data"),
            diagnostics.saturated_fraction(t, axis_name="data"),
            diagnostics.pairwise_diversity(fk, rl, axis_name="data"))

out = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("data"),) * 4, out_specs=(P(), P(), P())))(
    act, y, fake, real)
print(json.dumps([float(v) for v in out]))
"""


@pytest.mark.slow
def test_inside_shard_map_on_four_devices():
    from conftest import run_python

    proc = run_python(SHARD_MAP, devices=4, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dead, saturated, diversity = json.loads(proc.stdout.strip().splitlines()[-1])
    r = np.random.default_rng(1)
    act = np.maximum(r.normal(size=(8, 12)) - 1.5, 0).astype(np.float32)
    act[:7, 3] = 0.0
    act[7, 3] = 1.0
    y = np.tanh(3 * r.normal(size=(8, 5))).astype(np.float32)
    fake = r.normal(size=(8, 3)).astype(np.float32)
    real = r.normal(size=(8, 3)).astype(np.float32)
    np.testing.assert_allclose(dead, _np_dead(act), atol=1e-6)
    np.testing.assert_allclose(saturated, np.mean(np.abs(y) > 0.99), atol=1e-6)
    num = np.mean([_np_mean_pdist(s) for s in fake.reshape(4, 2, 3)])
    den = np.mean([_np_mean_pdist(s) for s in real.reshape(4, 2, 3)])
    np.testing.assert_allclose(diversity, num / den, rtol=1e-4)
