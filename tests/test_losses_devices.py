"""The relativistic pairing loss and the zero-centred R2 / R1 + R2 penalties in the train step:
the first iteration's global losses and gradient norms on 1 and on 8 devices agree."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_json

RUN = r"""
import json, sys
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from wgan_jax.config import apply_overrides, data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate

mesh = make_mesh()
sharding = NamedSharding(mesh, P(None, "data"))
results = {}
for name, overrides in json.loads(sys.argv[1]).items():
    c = get_config_schema()
    apply_overrides(c, overrides)
    shape, gan = data_shape(c), build_gan(c)
    state = replicate(create_train_state(gan, shape, c.seed, False), mesh)
    conditional = c.model.conditional != "none"
    freq = tuple(np.full(10, 0.1)) if conditional else ()
    step = make_train_step(StepConfig.from_config(c, freq), mesh, gan)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (c.n_critic, c.global_batch_size, *shape)).astype(np.float32)
    real = jax.device_put(images, sharding)
    if conditional:
        labels = rng.integers(0, 10, (c.n_critic, c.global_batch_size)).astype(np.int32)
        real = (real, jax.device_put(labels, sharding))
    state, metrics = step(state, real)
    results[name] = {k: float(v) for k, v in metrics.items()}
print(json.dumps(results))
"""

MLP = {"model.width": 32, "global_batch_size": 32, "n_critic": 2}
CASES = {
    "rpgan_r1r2": {**MLP, "loss": "rpgan", "penalty": "r1r2"},
    "hinge_r2": {**MLP, "loss": "hinge", "penalty": "r2"},
    "wasserstein_r2_layer": {**MLP, "penalty": "r2", "model.critic_norm": "layer"},
    "rpgan_r1r2_dcgan_conditional": {
        "dataset": "digits", "num_channels": 1, "model.kind": "dcgan", "image_size": 8,
        "model.width": 8, "model.z_dim": 8, "model.generator_norm": "batch",
        "global_batch_size": 16, "n_critic": 2, "model.conditional": "projection",
        "loss": "rpgan", "penalty": "r1r2"},
}


@pytest.fixture(scope="module")
def first_iterations():
    return {devices: run_json(RUN, json.dumps(CASES), devices=devices) for devices in (1, 8)}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_first_iteration_equal_on_one_and_eight_devices(case, first_iterations):
    one, eight = first_iterations[1][case], first_iterations[8][case]
    assert one["gradient_penalty"] > 0.0  # the penalty is on (not silently "none")
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "d_real", "d_fake",
                "grad_norm/critic", "grad_norm/generator"):
        np.testing.assert_allclose(one[key], eight[key], rtol=1e-4, atol=1e-6, err_msg=key)

