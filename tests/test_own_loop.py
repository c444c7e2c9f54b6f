"""Your own networks and loop on 1 and 8 devices: NNX networks give the same first iteration,
a dropout critic trains, DRAGAN's spread is the global batch's, and the library guide's Linen
and plain-function networks are the ones trained (its own loop: tests/test_docs_library.py)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from conftest import REPO, run_json

pytestmark = pytest.mark.slow  # subprocesses or whole runs

RUN = r"""
import json
import jax, jax.numpy as jnp, numpy as np, optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P
from wgan_jax.state import GAN, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step, network_key


class Generator(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(4, 16, use_bias=False, rngs=rngs)
        self.norm = nnx.BatchNorm(16, axis_name="data", use_fast_variance=False, rngs=rngs)
        self.out = nnx.Linear(16, 2, rngs=rngs)

    def __call__(self, z):
        return self.out(nnx.relu(self.norm(self.hidden(z))))


class Critic(nnx.Module):
    def __init__(self, rngs, rate):
        self.hidden = nnx.Linear(2, 16, rngs=rngs)
        self.drop = nnx.Dropout(rate, rngs=rngs)
        self.score = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.score(self.drop(nnx.relu(self.hidden(x))))[:, 0]


mesh = make_mesh()
out = {}
for name, rate, penalty, iters in (("nnx", 0.0, "gp", 1), ("dropout", 0.3, "gp", 3),
                                   ("dragan", 0.0, "dragan", 1)):
    gan = GAN(Generator(nnx.Rngs(0)), Critic(nnx.Rngs(1), rate), optax.adam(1e-3),
              optax.adam(1e-3), z_dim=4)
    state = jax.device_put(create_train_state(gan, (2,), 0, False), NamedSharding(mesh, P()))
    step = make_train_step(StepConfig(n_critic=2, penalty=penalty, penalty_weight=10.0), mesh, gan)
    # each example its own spread: every device's shard has a different one
    real = np.random.default_rng(0).normal(size=(2, 16, 2)) * (1.0 + np.arange(16))[:, None]
    rows = []
    for _ in range(iters):
        state, metrics = step(state, jax.device_put(real.astype(np.float32),
                                                    NamedSharding(mesh, P(None, "data"))))
        rows.append({k: float(v) for k, v in metrics.items()})
    out[name] = rows


def noise_init(rng, x):
    return {"w": jnp.ones(())}, {}


def noise_apply(params, state, x, *, train, rng=None):  # scores: pure noise from the key
    return params["w"] * jax.random.uniform(rng, x.shape[:1]) if train else x[:, 0], state


gan = GAN(Generator(nnx.Rngs(0)), (noise_init, noise_apply), optax.sgd(0.0), optax.sgd(0.0), 4)
state = jax.device_put(create_train_state(gan, (2,), 0, False), NamedSharding(mesh, P()))
step = make_train_step(StepConfig(n_critic=1, penalty="none"), mesh, gan)
_, metrics = step(state, jax.device_put(np.zeros((1, 16, 2), np.float32),
                                        NamedSharding(mesh, P(None, "data"))))
n = jax.device_count()
key = jax.random.fold_in(jax.random.split(jax.random.PRNGKey(0), 3)[2], 0)  # seed 0, step 0
expected = np.mean([jax.random.uniform(jax.random.fold_in(network_key(key, d, 0), 1), (16 // n,))
                    for d in range(n)])
out["noise"] = {"d_real": float(metrics["d_real"]), "expected": float(expected)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def runs():
    return {devices: run_json(RUN, devices=devices) for devices in (1, 8)}


KEYS = ("critic_loss", "generator_loss", "gradient_penalty", "wasserstein_estimate",
        "grad_norm/critic", "grad_norm/generator")


def _assert_same_first_iteration(one: dict, eight: dict) -> None:
    for key in KEYS:
        np.testing.assert_allclose(eight[key], one[key], rtol=1e-4, err_msg=key)


def test_nnx_networks_give_the_same_first_iteration_on_1_and_8_devices(runs):
    _assert_same_first_iteration(runs[1]["nnx"][0], runs[8]["nnx"][0])


def test_dragan_spread_is_the_global_batchs(runs):
    # The shards' spreads differ up to 16x, so a per-device spread would change the penalty.
    assert runs[1]["dragan"][0]["gradient_penalty"] > 1e-3
    _assert_same_first_iteration(runs[1]["dragan"][0], runs[8]["dragan"][0])


def test_a_dropout_critic_trains_with_finite_losses_on_1_and_8_devices(runs):
    for devices in (1, 8):
        rows = runs[devices]["dropout"]
        assert len(rows) == 3
        for row in rows:
            assert all(np.isfinite(row[k]) for k in KEYS), (devices, row)
            assert row["nonfinite_skipped"] == 0


def test_each_device_gets_its_own_network_key(runs):
    # The critic's scores on real data are uniform numbers drawn from the key it is given:
    # the logged mean must be that of the 8 devices' own keys (a shared key repeats numbers).
    for devices in (1, 8):
        noise = runs[devices]["noise"]
        assert noise["d_real"] == pytest.approx(noise["expected"], rel=1e-6), devices


def _guide_block(marker: str) -> str:
    with open(os.path.join(REPO, "docs", "library.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def _saved_shapes(workdir: str) -> dict:
    """The parameter shapes of the newest checkpoint, read without any model to restore into."""
    import orbax.checkpoint as ocp

    root = os.path.join(workdir, "checkpoints")
    newest = max((d for d in os.listdir(root) if d.isdigit()), key=int)
    saved = ocp.StandardCheckpointer().restore(os.path.join(root, newest, "state"))
    return {net: jax_shapes(saved[net]) for net in ("g_params", "d_params")}


def jax_shapes(tree):
    import jax

    return jax.tree.map(lambda x: tuple(np.shape(x)), tree)


@pytest.mark.parametrize("marker, g_names, d_names", [
    ("class LinenGenerator", {"Dense_0", "BatchNorm_0", "Dense_1"}, {"Dense_0", "Dense_1"}),
    ("def generator_init", {"w", "b"}, {"hidden", "score"}),
])
def test_guide_linen_and_plain_networks_are_the_ones_trained(marker, g_names, d_names,
                                                             tmp_path):
    import jax
    import jax.numpy as jnp

    from wgan_jax.config import get_config_schema
    from wgan_jax.models.contract import as_model
    from wgan_jax.train import train_and_evaluate

    namespace: dict = {}
    exec(compile(_guide_block(marker), "docs/library.md", "exec"), namespace)
    config = get_config_schema()
    config.dataset = "toy:8gaussians"
    config.num_iterations = 2
    config.global_batch_size = 16
    workdir = str(tmp_path / "run")
    summary = train_and_evaluate(config, workdir, generator=namespace["generator"],
                                 critic=namespace["critic"])
    assert summary["step"] == 2
    expected = {}
    for net, obj, example in (("g_params", namespace["generator"], (2, config.model.z_dim)),
                              ("d_params", namespace["critic"], (2, 2))):
        params, _ = jax.eval_shape(as_model(obj).init, jax.random.PRNGKey(0),
                                   jnp.zeros(example))
        expected[net] = jax_shapes(params)
    assert set(expected["g_params"]) == g_names and set(expected["d_params"]) == d_names
    assert _saved_shapes(workdir) == expected
