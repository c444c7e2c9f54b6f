"""DiffAugment and instance noise inside the train step (`augment`, `instance_noise`)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_json
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import augment, records, train
from wgan_jax.config import apply_overrides, data_shape, get_config_schema, validate_config
from wgan_jax.state import create_train_state
from wgan_jax.step import (
    INPUT_STREAM,
    StepConfig,
    draw_critic_inputs,
    make_mesh,
    make_train_step,
)

POLICY = "translation,cutout,color"
BASE = {"dataset": "digits", "model.kind": "dcgan", "model.width": 8, "model.z_dim": 16,
        "image_size": 8, "num_channels": 1, "global_batch_size": 16, "n_critic": 2,
        "num_iterations": 10}
CASES = {
    "plain": BASE,
    "augment_noise": {**BASE, "augment": POLICY, "instance_noise": 0.2},
    "augment": {**BASE, "augment": POLICY},
    "noise": {**BASE, "instance_noise": 0.2},
    "mlp_augment_noise_dragan": {**BASE, "model.kind": "mlp", "model.width": 32,
                                 "augment": "color,translation", "instance_noise": 0.1,
                                 "penalty": "dragan"},
}
ACROSS_DEVICES = ("augment_noise", "mlp_augment_noise_dragan")  # also run on 8 devices

RUN = r"""
import json, sys
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from wgan_jax.config import apply_overrides, data_shape, get_config_schema
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate

mesh = make_mesh()
results = {}
for name, overrides in json.loads(sys.argv[1]).items():
    c = get_config_schema()
    apply_overrides(c, overrides)
    shape = data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, c.seed, False), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    real = np.random.default_rng(0).uniform(-1, 1, (c.n_critic, c.global_batch_size, *shape))
    real = jax.device_put(real.astype(np.float32), NamedSharding(mesh, P(None, "data")))
    _, metrics = step(state, real)
    results[name] = {k: float(v) for k, v in metrics.items()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def first_iteration():
    """{devices: {case: first-iteration metrics}}: every case on 1 device, ACROSS_DEVICES on 8."""
    out = {}
    for devices in (1, 8):
        cases = CASES if devices == 1 else {k: CASES[k] for k in ACROSS_DEVICES}
        out[devices] = run_json(RUN, json.dumps(cases), devices=devices)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", ACROSS_DEVICES)
def test_one_and_eight_devices_see_the_same_augmentation(case, first_iteration):
    """The augmentations and the noise are drawn for the global batch before the split: a
    per-device draw would give different losses and gradients on 8 devices."""
    one, eight = first_iteration[1][case], first_iteration[8][case]
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "wasserstein_estimate"):
        assert one[key] == pytest.approx(eight[key], rel=1e-3, abs=1e-5), key
    for key in ("grad_norm/critic", "grad_norm/generator", "input_grad_norm/interp_mean"):
        assert one[key] == pytest.approx(eight[key], rel=1e-5), key


@pytest.mark.slow
@pytest.mark.parametrize("case", ["augment_noise", "augment", "noise"])
def test_augmentation_and_noise_change_the_step(case, first_iteration):
    """Same seed, same data: each of augment and instance noise changes every loss and both
    gradient norms (a step that ignored them would reproduce the plain run)."""
    plain, changed = first_iteration[1]["plain"], first_iteration[1][case]
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "grad_norm/critic",
                "grad_norm/generator"):
        assert abs(changed[key] - plain[key]) > 1e-4 * max(1.0, abs(plain[key])), key
    assert ("instance_noise_sigma" in changed) == ("noise" in case)
    assert "instance_noise_sigma" not in plain


def _config(**overrides):
    c = get_config_schema()
    apply_overrides(c, {**BASE, "n_critic": 1, **overrides})
    validate_config(c, 1)
    return c


@pytest.mark.slow
def test_penalty_and_loss_see_the_augmented_noisy_real_batch():
    """A penalty that reports the mean of the real batch it is given: it equals the mean of
    augment(real) + sigma * noise computed independently from `draw_critic_inputs`' numbers,
    and differs from the raw batch's mean."""

    def mean_of_real(critic_fn, real, fake, draws, *, target, axis_name):
        return jnp.mean(real) + 0.0 * jnp.mean(critic_fn(real)), None

    c = _config(augment=POLICY, instance_noise=0.3)
    cfg = StepConfig(**{**StepConfig.from_config(c).__dict__, "penalty": mean_of_real})
    mesh = make_mesh()
    gan = train.build_gan(c)
    state = jax.device_get(create_train_state(gan, data_shape(c), c.seed, False))
    real = np.random.default_rng(1).uniform(-1, 1, (1, 16, *data_shape(c))).astype(np.float32)
    step = make_train_step(cfg, mesh, gan)
    _, metrics = step(train.replicate(state, mesh),
                      jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
    key = jax.random.fold_in(jax.random.fold_in(state.rng, 0), INPUT_STREAM)
    seen, sigma = draw_critic_inputs(cfg, key, 0, 16, data_shape(c))
    params = jax.tree.map(lambda p: p[0], seen.real_augment)
    expected = augment.apply(jnp.asarray(real[0]), params, POLICY) + seen.real_noise[0]
    assert float(sigma) == pytest.approx(0.3)
    assert float(jnp.std(seen.real_noise[0])) == pytest.approx(0.3, rel=0.1)
    assert float(metrics["gradient_penalty"]) == pytest.approx(float(jnp.mean(expected)),
                                                               rel=1e-5, abs=1e-6)
    assert abs(float(metrics["gradient_penalty"]) - float(np.mean(real))) > 1e-3


@pytest.mark.slow
def test_short_run_with_augment_logs_annealed_sigma_and_finite_losses(tmp_path, monkeypatch):
    """train_and_evaluate with augment and instance noise: finite losses; the logged sigma is
    `instance_noise` at the first iteration, falls linearly, and is exactly 0 at the last."""
    c = _config(augment=POLICY, instance_noise=0.25, num_iterations=5, log_every=1,
                sample_every=0, eval_every=0, checkpoint_every=0, plot_every=0)
    summary = train.train_and_evaluate(c, str(tmp_path), pictures=False)
    assert summary["step"] == 5
    with open(tmp_path / records.METRICS_FILE) as f:
        rows = [json.loads(line) for line in f if '"critic_loss"' in line]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    sigmas = [r["instance_noise_sigma"] for r in rows]
    assert sigmas[0] == pytest.approx(0.25) and sigmas[-1] == 0.0
    np.testing.assert_allclose(np.diff(sigmas), -0.0625, rtol=1e-5)
    for row in rows:
        for key in ("critic_loss", "generator_loss", "gradient_penalty"):
            assert np.isfinite(row[key]), (row["step"], key)
