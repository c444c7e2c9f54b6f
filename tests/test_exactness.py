"""The same run on 1 and on 8 devices gives the same parameters (up to float re-association)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_json

pytestmark = pytest.mark.slow  # subprocesses or whole runs

RUN = r"""
import json, sys
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from wgan_jax.config import apply_overrides, data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate

mesh = make_mesh()


def run(c, out, iters=3):
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, c.seed, c.ema_decay > 0), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    rng = np.random.default_rng(0)
    sharding = NamedSharding(mesh, P(None, "data"))
    for _ in range(iters):
        real = rng.uniform(-1, 1, (c.n_critic, c.global_batch_size, *shape)).astype(np.float32)
        state, metrics = step(state, jax.device_put(real, sharding))
    leaves = jax.tree.leaves((state.g_params, state.g_state, state.d_params, state.ema_params))
    np.save(out, np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in leaves]))
    return {k: float(v) for k, v in metrics.items()}


results = {}
for name, overrides in json.loads(sys.argv[1]).items():
    c = get_config_schema()
    apply_overrides(c, overrides)
    results[name] = run(c, sys.argv[2] + name + ".npy")
print(json.dumps(results))
"""

# Each case is compiled twice (1 and 8 devices), the suite's costliest programs: the plain
# WGAN-GP MLP is the BatchNorm+EMA case without them, DRAGAN+hinge an MLP without BatchNorm, and
# the DCGAN's parameters are compared with every in-step diagnostic on.
CASES = {
    "mlp_batchnorm_ema": {"model.width": 64, "global_batch_size": 64,
                          "model.generator_norm": "batch", "ema_decay": 0.99},
    "dragan_hinge": {"model.width": 32, "global_batch_size": 32, "penalty": "dragan",
                     "loss": "hinge"},
    "dcgan_full_diagnostics": {"dataset": "digits", "model.kind": "dcgan", "model.width": 8,
                               "model.z_dim": 16, "image_size": 16, "num_channels": 1,
                               "model.generator_norm": "batch", "global_batch_size": 16,
                               "penalty_weight": 10.0, "n_critic": 2,
                               "diagnostics.level": "full"},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("exact")
    metrics = {devices: run_json(RUN, json.dumps(CASES), str(out / f"d{devices}_"),
                                 devices=devices) for devices in (1, 8)}
    return out, metrics


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_and_eight_devices_agree(case, runs):
    out, metrics = runs
    a, b = np.load(out / f"d1_{case}.npy"), np.load(out / f"d8_{case}.npy")
    relative = np.linalg.norm(a - b) / np.linalg.norm(a)
    assert relative <= 1e-5, f"{case}: relative L2 difference {relative:.2e}"
    # the reported metrics are global means, not per-device or summed values
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "wasserstein_estimate"):
        assert metrics[1][case][key] == pytest.approx(metrics[8][case][key], rel=1e-3, abs=1e-5)


def test_in_step_diagnostics_are_exact_across_devices(runs):
    """Per-layer norms, unit statistics and input-gradient norms: same on 1 and 8 devices."""
    _, metrics = runs
    one, eight = metrics[1]["dcgan_full_diagnostics"], metrics[8]["dcgan_full_diagnostics"]
    assert one.keys() == eight.keys()
    layer_keys = [k for k in one if k.startswith(("grad_norm/", "weight_norm/", "update_ratio/"))]
    assert len(layer_keys) > 10, sorted(one)
    for key in layer_keys + ["input_grad_norm/real_mean", "input_grad_norm/fake_mean",
                             "dead_units/generator", "saturated/generator"]:
        assert one[key] == pytest.approx(eight[key], rel=1e-3, abs=1e-6), key
    # the per-layer gradient norms add up (in squares) to the global one
    for net in ("generator", "critic"):
        layers = [v for k, v in one.items() if k.startswith(f"grad_norm/{net}/")]
        assert np.sqrt(np.sum(np.square(layers))) == pytest.approx(one[f"grad_norm/{net}"],
                                                                   rel=1e-4)
