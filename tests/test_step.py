"""The train step's parts (`wgan_jax.step`): the draws and their specs, a critic update and a
generator update against closed forms, the metric assembly and the EMA, each part also
checked against what the whole step returns."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

from wgan_jax import step as st
from wgan_jax.state import GAN, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_batches, place_state

DIM, Z, B, LR, LAMBDA = 3, 2, 8, 0.1, 10.0


def linear_gan() -> GAN:
    """G(z) = z A and D(x) = x w + b: the WGAN-GP loss and its gradients in closed form."""
    generator = (lambda rng, z: ({"A": jnp.asarray([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]])}, {}),
                 lambda p, s, z, *, train, rng=None: (z @ p["A"], s))
    critic = (lambda rng, x: ({"w": jnp.asarray([0.5, -1.0, 2.0]), "b": jnp.zeros(())}, {}),
              lambda p, s, x, *, train, rng=None: (x @ p["w"] + p["b"], s))
    return GAN(generator, critic, optax.sgd(LR), optax.sgd(LR), z_dim=Z)


def real_batch(n_critic: int = 1) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n_critic, B, DIM)).astype(np.float32) + 1.0


@pytest.mark.parametrize("kw", [
    {}, {"penalty": "dragan"}, {"augment": "translation,cutout", "instance_noise": 0.1},
    {"class_frequencies": (0.25, 0.75)},
])
def test_the_draws_spec_pytree_matches_the_draws(kw):
    """Every leaf of `StepDraws` sits under the spec `draw_specs` gives it, and the split
    dimension is the global batch: the critic's `[n_critic, B, ...]`, the generator's `[B]`."""
    cfg = StepConfig(n_critic=3, num_iterations=10, **kw)
    images = jnp.zeros((3, B, 4, 4, 1))
    state = SimpleNamespace(rng=jax.random.PRNGKey(0), step=jnp.int32(4))
    draws, sigma = st.draw_step(cfg, Z, state, images)
    seen = []

    def check(spec, subtree):
        for leaf in jax.tree.leaves(subtree):
            if spec == P(None, "data"):
                assert leaf.shape[:2] == (3, B)
            elif spec == P("data"):
                assert leaf.shape[0] == B
            else:
                assert spec == P() and leaf.shape == state.rng.shape
            seen.append(leaf)

    jax.tree.map(check, st.draw_specs("data"), draws, is_leaf=lambda x: isinstance(x, P))
    assert len(seen) == len(jax.tree.leaves(draws))
    if "augment" in kw:
        assert draws.inputs.real_augment and draws.inputs.generator_augment
        assert float(sigma) == pytest.approx(0.1 * (1 - 4 / 9))
    if kw.get("penalty") == "dragan":
        assert draws.iteration.noise.shape == (3, B, 4, 4, 1)
    if "class_frequencies" in kw:
        assert draws.iteration.z_generator[1].shape == (B,)


def test_critic_and_generator_updates_match_the_closed_form_and_the_whole_step():
    """One iteration, n_critic=1, SGD: the critic's step is w - lr (mean(fake) - mean(real)
    + 2 lambda (|w| - 1) w / |w|), the generator's A + lr mean(z) w'^T against the updated
    critic; `critic_steps` alone gives the critic the whole step gives."""
    gan, mesh = linear_gan(), make_mesh(jax.devices()[:1])
    cfg = StepConfig(n_critic=1, penalty_weight=LAMBDA)
    state0 = create_train_state(gan, (DIM,), seed=0, ema=False, check=False)
    real = place_batches(real_batch(), mesh)
    draws, _ = st.draw_step(cfg, Z, state0, real)

    bundle = st.StepBundle(cfg, gan)
    critic_only = jax.jit(jax.shard_map(
        lambda s, r, d: st.critic_steps(bundle, s, r, d, lax.axis_index("data")),
        mesh=mesh, in_specs=(P(), P(None, "data"), st.draw_specs("data")),
        out_specs=(P(), P())))
    carry, critic_metrics = critic_only(place_state(state0, mesh), real, draws)
    state, metrics = make_train_step(cfg, mesh, gan)(place_state(state0, mesh), real)

    w, a = np.asarray(state0.d_params["w"]), np.asarray(state0.g_params["A"])
    z, x = np.asarray(draws.iteration.z_critic[0]), np.asarray(real[0])
    fake = z @ a
    norm = np.linalg.norm(w)
    grad_w = fake.mean(0) - x.mean(0) + 2 * LAMBDA * (norm - 1) * w / norm
    new_w = w - LR * grad_w
    np.testing.assert_allclose(carry.d_params["w"], new_w, rtol=1e-5)
    np.testing.assert_allclose(state.d_params["w"], carry.d_params["w"], rtol=0, atol=0)
    assert float(metrics["gradient_penalty"]) == pytest.approx((norm - 1) ** 2, rel=1e-5)
    assert float(metrics["critic_loss"]) == pytest.approx(float((fake - x).mean(0) @ w),
                                                          rel=1e-5)
    assert float(critic_metrics["critic_loss"][0]) == float(metrics["critic_loss"])
    z_gen = np.asarray(draws.iteration.z_generator)
    new_a = a + LR * np.outer(z_gen.mean(0), new_w)  # loss -mean(z A w'): its gradient
    np.testing.assert_allclose(state.g_params["A"], new_a, rtol=1e-5)
    assert float(metrics["grad_norm/generator"]) == pytest.approx(
        np.linalg.norm(np.outer(z_gen.mean(0), new_w)), rel=1e-5)


def test_step_metrics_average_the_critic_updates_and_count_skipped_updates():
    critic = {"critic_loss": jnp.asarray([1.0, 2.0, 6.0]),
              "input_grad_norm/interp_max": jnp.asarray([1.5, 3.0, 2.0])}
    g_opt = SimpleNamespace(total_notfinite=jnp.int32(2), notfinite_count=jnp.int32(1))
    d_opt = SimpleNamespace(total_notfinite=jnp.int32(3), notfinite_count=jnp.int32(0))
    metrics = st.step_metrics({"generator_loss": jnp.float32(0.5)}, critic, g_opt, d_opt)
    assert {k: float(v) for k, v in metrics.items()} == {
        "generator_loss": 0.5, "critic_loss": 3.0, "input_grad_norm/interp_max": 3.0,
        "nonfinite_skipped": 5.0, "nonfinite_consecutive": 1.0}
    plain = st.step_metrics({}, {"critic_loss": jnp.ones(2)}, {}, {})
    assert float(plain["nonfinite_skipped"]) == 0.0


def test_ema_update_follows_the_warmup_decay():
    params = {"A": jnp.full((2,), 4.0)}
    state = SimpleNamespace(ema_params={"A": jnp.zeros((2,))}, step=jnp.int32(0))
    ema = st.ema_update(0.999, state, params)  # decay min(0.999, 1/10) at step 0
    np.testing.assert_allclose(ema["A"], [3.6, 3.6], rtol=1e-6)
    assert st.ema_update(0.999, SimpleNamespace(ema_params=None, step=0), params) is None


def test_check_real_refuses_a_wrong_form_in_one_line():
    mesh = make_mesh(jax.devices()[:1])
    with pytest.raises(ValueError, match="expected \\[n_critic=2"):
        st.check_real(StepConfig(n_critic=2), mesh, jnp.zeros((3, B, DIM)))
    with pytest.raises(ValueError, match="takes real = \\(images, labels\\)"):
        st.check_real(StepConfig(class_frequencies=(0.5, 0.5)), mesh, jnp.zeros((5, B, DIM)))
