"""Your NNX modules stay yours: nothing the library does deletes their arrays, and the trained
networks come back as NNX modules that sample what the final state samples."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from own_nets import CaseNNXCritic, CaseNNXGenerator

from wgan_jax import runs
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.state import GAN, apply_generator, create_train_state, update_modules
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_batches, place_state
from wgan_jax.train import train_and_evaluate

Z = jnp.asarray(np.random.default_rng(0).normal(size=(6, 8)), jnp.float32)


def _sample(gen: nnx.Module) -> np.ndarray:
    gen.eval()
    return np.asarray(gen(Z))


@pytest.mark.slow
def test_own_modules_are_callable_after_create_train_state_and_three_steps():
    gen, critic = CaseNNXGenerator(), CaseNNXCritic(norm=False)
    before = _sample(gen)
    gan = GAN(gen, critic, optax.adam(1e-3), optax.adam(1e-3), z_dim=8)
    mesh = make_mesh()
    state = place_state(create_train_state(gan, (8, 8, 1), seed=0, ema=True), mesh)
    np.testing.assert_array_equal(_sample(gen), before)
    step = make_train_step(StepConfig(n_critic=2), mesh, gan)
    real = np.random.default_rng(1).uniform(-1, 1, size=(2, 8, 8, 8, 1)).astype(np.float32)
    for _ in range(3):
        state, metrics = step(state, place_batches(real, mesh))
        assert np.isfinite(float(metrics["critic_loss"]))
    # untouched, and usable for a second state
    np.testing.assert_array_equal(_sample(gen), before)
    critic(jnp.zeros((2, 8, 8, 1)))
    create_train_state(gan, (8, 8, 1), seed=0, ema=False, check=False)

    for use_ema in (False, True):
        trained = nnx.clone(gen)
        update_modules(state, generator=trained, use_ema=use_ema)
        expected = np.asarray(apply_generator(gan, state, Z, use_ema=use_ema))
        np.testing.assert_allclose(_sample(trained), expected, rtol=1e-6, atol=1e-6)
        assert not np.allclose(expected, before, atol=1e-4)  # the trained weights, not gen's
    # the state's next step does not delete what update_modules wrote
    state, _ = step(state, place_batches(real, mesh))
    _sample(trained)


def test_update_modules_refuses_what_it_cannot_do():
    gan = GAN(CaseNNXGenerator(), CaseNNXCritic(norm=False), optax.sgd(0.1), optax.sgd(0.1), 8)
    state = create_train_state(gan, (8, 8, 1), seed=0, ema=False)
    with pytest.raises(ValueError, match="keeps no EMA"):
        update_modules(state, generator=CaseNNXGenerator(), use_ema=True)
    with pytest.raises(ValueError, match="do not match"):
        update_modules(state, generator=CaseNNXGenerator(z_dim=4))
    with pytest.raises(ValueError, match="not a Flax NNX module"):
        update_modules(state, generator=(lambda: 0, lambda: 0))


@pytest.mark.slow
@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_train_and_evaluate_returns_trained_modules_and_leaves_yours(tmp_path, ema):
    config = get_config_schema()
    apply_overrides(config, {
        "dataset": "digits", "image_size": 8, "num_channels": 1, "global_batch_size": 16,
        "n_critic": 2, "num_iterations": 3, "log_every": 1, "sample_every": 0,
        "plot_every": 0, "checkpoint_every": 0, "model.z_dim": 8, "ema_decay": ema,
    })
    gen, critic = CaseNNXGenerator(), CaseNNXCritic(norm=False)
    before = _sample(gen)
    workdir = str(tmp_path / "run")
    summary = train_and_evaluate(config, workdir, generator=gen, critic=critic)
    np.testing.assert_array_equal(_sample(gen), before)  # yours: alive and unchanged
    critic(jnp.zeros((2, 8, 8, 1)))
    run = runs.load_run(workdir, generator=gen, critic=critic)
    assert run.step == 3
    expected = np.asarray(apply_generator(run.gan, run.state, Z, use_ema=ema > 0))
    np.testing.assert_allclose(_sample(summary["generator"]), expected, rtol=1e-5, atol=1e-6)
    scores = run.gan.critic.apply(run.state.d_params, run.state.d_state,
                                  jnp.asarray(expected), train=False)[0]
    summary["critic"].eval()
    np.testing.assert_allclose(np.asarray(summary["critic"](jnp.asarray(expected))),
                               np.asarray(scores), rtol=1e-5, atol=1e-6)
