"""The model contract (NNX, Linen, plain functions), the step's explicit config, its penalties
and the non-finite guard around a user's own optimizer (one device, in process)."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import penalties
from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.errors import ConfigError
from wgan_jax.models.contract import Model, as_model
from wgan_jax.state import GAN, create_train_state, skip_nonfinite
from wgan_jax.step import StepConfig, draw_iteration, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate


class NNXGenerator(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, axis_name: str = "data"):
        self.hidden = nnx.Linear(4, 16, use_bias=False, rngs=rngs)
        self.norm = nnx.BatchNorm(16, axis_name=axis_name, use_fast_variance=False, rngs=rngs)
        self.out = nnx.Linear(16, 2, rngs=rngs)

    def __call__(self, z):
        h = nnx.relu(self.norm(self.hidden(z)))
        self.sow(nnx.Intermediate, "relu_0", h)
        return self.out(h)


class NNXDropoutCritic(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, rate: float = 0.5):
        self.hidden = nnx.Linear(2, 16, rngs=rngs)
        self.drop = nnx.Dropout(rate, rngs=rngs)
        self.score = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.score(self.drop(nnx.relu(self.hidden(x))))[:, 0]


class LinenDropoutCritic(nn.Module):
    @nn.compact
    def __call__(self, x, train=True):
        h = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(16)(x)))
        return nn.Dense(1)(h)[:, 0]


def test_nnx_module_params_state_train_and_eval():
    model = as_model(NNXGenerator(nnx.Rngs(0), axis_name=None))
    assert model.kind == "nnx"
    params, state = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 4)))
    assert set(params) == {"hidden", "norm", "out"} and set(state) == {"norm"}
    assert params["hidden"]["kernel"].shape == (4, 16) and state["norm"]["mean"].shape == (16,)
    z = jax.random.normal(jax.random.PRNGKey(1), (8, 4)) + 3.0
    out, new_state = jax.jit(lambda p, s, z: model.apply(p, s, z, train=True))(params, state, z)
    assert out.shape == (8, 2)
    assert not np.allclose(new_state["norm"]["mean"], state["norm"]["mean"])  # stats updated
    _, same = model.apply(params, state, z, train=False)
    np.testing.assert_array_equal(same["norm"]["mean"], state["norm"]["mean"])
    _, _, acts = model.capture(params, state, z, train=True)
    assert list(acts) and all("relu_0" in k for k in acts) and acts[next(iter(acts))].shape == (
        8, 16)


@pytest.mark.parametrize("make", [lambda: NNXDropoutCritic(nnx.Rngs(0)), LinenDropoutCritic])
def test_the_given_key_drives_dropout_and_eval_mode_turns_it_off(make):
    model = as_model(make())
    x = jnp.ones((4, 2))
    params, state = model.init(jax.random.PRNGKey(0), x)
    apply = jax.jit(lambda p, s, x, k: model.apply(p, s, x, train=True, rng=k)[0])
    a, b = apply(params, state, x, jax.random.PRNGKey(1)), apply(params, state, x,
                                                                  jax.random.PRNGKey(2))
    again = apply(params, state, x, jax.random.PRNGKey(1))
    assert not np.allclose(a, b)  # different keys, different masks
    np.testing.assert_array_equal(a, again)  # the key alone decides
    e1 = model.apply(params, state, x, train=False)[0]
    e2 = model.apply(params, state, x, train=False, rng=jax.random.PRNGKey(3))[0]
    np.testing.assert_array_equal(e1, e2)


def test_plain_pair_and_model_pass_through_and_junk_is_refused():
    def init(rng, x):
        return {"w": jax.random.normal(rng, (x.shape[-1],))}, {}

    def apply(params, state, x, *, train, rng=None):
        return x @ params["w"], state

    model = as_model((init, apply))
    assert isinstance(model, Model) and model.init is init and as_model(model) is model
    with pytest.raises(TypeError) as error:
        as_model("my_pkg.nets:make")
    assert "builtins.str" in str(error.value) and "nnx.Module" in str(error.value)
    with pytest.raises(TypeError, match="a tuple of 3"):
        as_model((init, apply, apply))


def _config(**overrides):
    c = get_config_schema()
    c.model.width = 16
    c.global_batch_size = 8
    c.n_critic = 1
    for key, value in overrides.items():
        c[key] = value
    return c


def _step_once(c, cfg, gan=None, real=None, mesh=None):
    mesh = mesh or make_mesh()
    gan = gan or build_gan(c)
    shape = data_shape(c)
    state = jax.device_get(create_train_state(gan, shape, c.seed, False, axis_name=cfg.axis_name))
    if real is None:
        rng = np.random.default_rng(0)
        real = rng.normal(size=(cfg.n_critic, c.global_batch_size, *shape)).astype(np.float32)
    sharded = jax.device_put(real, NamedSharding(mesh, P(None, cfg.axis_name)))
    step = make_train_step(cfg, mesh, gan)
    new_state, metrics = step(replicate(state, mesh), sharded)
    return gan, state, real, new_state, {k: float(v) for k, v in metrics.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gp", "lp", "r1", "dragan"])
def test_step_penalty_equals_the_public_function(name):
    c = _config(penalty=name, penalty_target=0.01, dragan_scale=0.7)
    cfg = StepConfig.from_config(c)
    gan, state, real, _, metrics = _step_once(c, cfg)
    draws = draw_iteration(cfg, jax.random.fold_in(state.rng, 0), 8, data_shape(c), gan.z_dim)
    fake, _ = gan.generator.apply(state.g_params, state.g_state, draws.z_critic[0], train=True)
    real, alpha = jnp.asarray(real[0]), draws.alpha[0]

    def critic(x):
        return gan.critic.apply(state.d_params, state.d_state, x, train=False)[0]

    def at(points, **kwargs):
        return penalties.penalty_from_norms(penalties.input_gradient_norms(critic, points),
                                            **kwargs)

    expected = {
        "gp": lambda: at(penalties.interpolate_with(real, fake, alpha), target=0.01),
        "lp": lambda: at(penalties.interpolate_with(real, fake, alpha), target=0.01,
                         one_sided=True),
        "r1": lambda: penalties.r1(critic, real)[0],
        "dragan": lambda: at(
            penalties.dragan_points(real, draws.noise[0], alpha, jnp.std(real), 0.7),
            target=0.01),
    }[name]()
    assert float(expected) > 1e-3
    np.testing.assert_allclose(metrics["gradient_penalty"], float(expected), rtol=1e-5)


def test_a_user_penalty_callable_is_used_with_the_same_signature():
    seen = {}

    def constant_penalty(critic_fn, real, fake, draws, *, target, axis_name):
        seen.update(real=real.shape, noise=draws.noise.shape, axis=axis_name, target=target)
        return 3.25 + 0.0 * jnp.mean(critic_fn(real)), None

    c = _config()
    cfg = dataclasses.replace(StepConfig.from_config(c), penalty=constant_penalty,
                              penalty_target=0.25)
    *_, metrics = _step_once(c, cfg)
    assert metrics["gradient_penalty"] == pytest.approx(3.25)
    assert seen == {"real": (8, 2), "noise": (8, 2), "axis": "data", "target": 0.25}
    assert "input_grad_norm/interp_mean" not in metrics  # the callable returned no norms


@pytest.mark.slow
def test_step_config_and_mesh_axis_are_checked_and_any_axis_name_works():
    with pytest.raises(ConfigError, match="StepConfig.penalty='gradient'"):
        StepConfig(penalty="gradient")
    with pytest.raises(ConfigError, match="StepConfig.diagnostics"):
        StepConfig(diagnostics="verbose")
    gan = GAN(NNXGenerator(nnx.Rngs(0), axis_name="batch"), NNXDropoutCritic(nnx.Rngs(1), 0.0),
              optax.adam(1e-3), optax.adam(1e-3), z_dim=4)
    with pytest.raises(ConfigError, match="'data' is not an axis"):
        make_train_step(StepConfig(n_critic=1), make_mesh(axis_name="batch"), gan)
    c = _config()
    cfg = StepConfig(n_critic=1, axis_name="batch", diagnostics="full")
    *_, metrics = _step_once(c, cfg, gan=gan, mesh=make_mesh(axis_name="batch"))
    assert np.isfinite(metrics["critic_loss"]) and "dead_units/generator" in metrics


def test_a_plain_optimizer_still_skips_and_counts_nonfinite_updates():
    already = optax.apply_if_finite(optax.sgd(0.1), max_consecutive_errors=3)
    assert skip_nonfinite(already) is already
    c = _config(n_critic=2)
    nets = build_gan(c)
    gan = GAN(nets.generator, nets.critic, optax.sgd(0.1), optax.sgd(0.1), c.model.z_dim)
    real = np.full((2, 8, 2), np.nan, np.float32)  # a NaN critic gradient
    _, state, _, new_state, metrics = _step_once(c, StepConfig.from_config(c), gan=gan,
                                                 real=real)
    assert metrics["nonfinite_skipped"] == 2 and metrics["nonfinite_consecutive"] == 2
    for before, after in zip(jax.tree.leaves(state.d_params),
                             jax.tree.leaves(new_state.d_params), strict=True):
        np.testing.assert_array_equal(before, after)
