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


# Each loss and penalty once on 1 and 8 devices (RpGAN + R1/R2 on the conditional DCGAN; the
# MLP's RpGAN case is the in-process tests' below).
ACROSS_DEVICES = ("hinge_r2", "wasserstein_r2_layer", "rpgan_r1r2_dcgan_conditional")


@pytest.fixture(scope="module")
def first_iterations():
    cases = {k: CASES[k] for k in ACROSS_DEVICES}
    return {devices: run_json(RUN, json.dumps(cases), devices=devices) for devices in (1, 8)}


@pytest.mark.slow
@pytest.mark.parametrize("case", ACROSS_DEVICES)
def test_first_iteration_equal_on_one_and_eight_devices(case, first_iterations):
    one, eight = first_iterations[1][case], first_iterations[8][case]
    assert one["gradient_penalty"] > 0.0  # the penalty is on (not silently "none")
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "d_real", "d_fake",
                "grad_norm/critic", "grad_norm/generator"):
        np.testing.assert_allclose(one[key], eight[key], rtol=1e-4, atol=1e-6, err_msg=key)



@pytest.mark.slow
def test_rpgan_generator_loss_in_the_step_pairs_fakes_with_the_last_real_batch():
    """The step's "rpgan" generator loss, rebuilt by hand: the critic after its updates
    scores the last critic batch's real examples and the generator's fakes from the
    iteration's own latents; softplus(D(real_i) - D(fake_i)), averaged, in float64."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from wgan_jax.config import apply_overrides, data_shape, get_config_schema
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, draw_iteration, make_mesh, make_train_step
    from wgan_jax.train import build_gan, replicate

    c = get_config_schema()
    apply_overrides(c, CASES["rpgan_r1r2"])
    shape, gan, mesh = data_shape(c), build_gan(c), make_mesh()
    state = create_train_state(gan, shape, c.seed, False)
    g_params, g_state = jax.tree.map(np.asarray, (state.g_params, state.g_state))
    rng = np.asarray(state.rng)
    cfg = StepConfig.from_config(c)
    real = np.random.default_rng(1).uniform(
        -1, 1, (c.n_critic, c.global_batch_size, *shape)).astype(np.float32)
    new_state, metrics = make_train_step(cfg, mesh, gan)(
        replicate(state, mesh), jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
    draws = draw_iteration(cfg, jax.random.fold_in(rng, 0), c.global_batch_size, shape,
                           gan.z_dim)
    fake, _ = gan.generator.apply(g_params, g_state, draws.z_generator, train=True)

    def critic(x):
        scores = gan.critic.apply(new_state.d_params, new_state.d_state, x, train=False)[0]
        return np.asarray(scores, np.float64)

    gap = critic(real[-1]) - critic(np.asarray(fake))
    np.testing.assert_allclose(float(metrics["generator_loss"]),
                               np.mean(np.logaddexp(0.0, gap)), rtol=1e-5)
    # not the Wasserstein/hinge generator loss of the same scores
    assert abs(float(metrics["generator_loss"]) + np.mean(critic(np.asarray(fake)))) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["r2", "r1r2"])
def test_step_penalty_is_r1_on_real_plus_r2_on_the_critic_batch_fakes(name):
    """The step's first critic update's penalty, rebuilt from the public pieces: squared
    input-gradient norms of the initial critic at the first real batch (R1) and at the
    generator's fakes from the iteration's first critic latents (R2)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from wgan_jax import penalties
    from wgan_jax.config import apply_overrides, data_shape, get_config_schema
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, draw_iteration, make_mesh, make_train_step
    from wgan_jax.train import build_gan, replicate

    c = get_config_schema()
    apply_overrides(c, {"model.width": 16, "global_batch_size": 8, "n_critic": 1,
                        "penalty": name})
    shape, gan, mesh = data_shape(c), build_gan(c), make_mesh()
    state = jax.device_get(create_train_state(gan, shape, c.seed, False))  # the step donates
    cfg = StepConfig.from_config(c)
    real = np.random.default_rng(2).normal(size=(1, 8, *shape)).astype(np.float32)
    _, metrics = make_train_step(cfg, mesh, gan)(
        replicate(state, mesh), jax.device_put(real, NamedSharding(mesh, P(None, "data"))))
    draws = draw_iteration(cfg, jax.random.fold_in(state.rng, 0), 8, shape, gan.z_dim)
    fake, _ = gan.generator.apply(state.g_params, state.g_state, draws.z_critic[0], train=True)

    def critic(x):
        return gan.critic.apply(state.d_params, state.d_state, x, train=False)[0]

    r2 = jnp.mean(jnp.square(penalties.input_gradient_norms(critic, fake)))
    expected = float(r2) + (float(penalties.r1(critic, jnp.asarray(real[0]))[0])
                            if name == "r1r2" else 0.0)
    assert expected > 1e-3
    np.testing.assert_allclose(float(metrics["gradient_penalty"]), expected, rtol=1e-5)
