"""DiffAugment (`wgan_jax.augment`), instance noise, and the CLI refusing bad issue-16 keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_module
from test_cli import _assert_clean_failure

from wgan_jax import augment
from wgan_jax.config import apply_overrides, get_config_schema, validate_config
from wgan_jax.errors import ConfigError
from wgan_jax.models.mlp import MLPCritic, MLPGenerator

SHAPE = (8, 8, 3)
ALL = "translation,cutout,color"


def images(batch: int = 16, seed: int = 0) -> jax.Array:
    return jax.random.uniform(jax.random.PRNGKey(seed), (batch, *SHAPE), minval=-1, maxval=1)


def test_same_key_same_augmentation_and_different_keys_differ():
    x = images()
    a = augment.apply(x, augment.draw(jax.random.PRNGKey(3), 16, SHAPE, ALL), ALL)
    b = augment.apply(x, augment.draw(jax.random.PRNGKey(3), 16, SHAPE, ALL), ALL)
    c = augment.apply(x, augment.draw(jax.random.PRNGKey(4), 16, SHAPE, ALL), ALL)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert not np.allclose(a, x)


@pytest.mark.parametrize("policy", ["translation", "cutout", "color", ALL])
def test_per_example_result_independent_of_the_batch_split(policy):
    """Whole batch == the halves augmented apart with their rows of the params (1 vs N
    devices: the step draws for the global batch and splits params like the images)."""
    x = images()
    params = augment.draw(jax.random.PRNGKey(5), 16, SHAPE, policy)
    whole = augment.apply(x, params, policy)
    halves = [augment.apply(x[s], jax.tree.map(lambda p, s=s: p[s], params), policy)
              for s in (slice(0, 8), slice(8, 16))]
    np.testing.assert_array_equal(whole, np.concatenate(halves))
    for leaf in jax.tree.leaves(params):
        assert leaf.shape[0] == 16  # every number belongs to one example


def test_translation_and_cutout_match_the_reference_definitions():
    """Closed forms: a shift by (dy, dx) with zero fill, and a zeroed square of half the size."""
    x = images(2)
    params = {"translation": jnp.array([[1, -1], [0, 0]])}
    out = np.asarray(augment.apply(x, params, "translation"))
    expected = np.zeros_like(out[0])
    expected[:-1, 1:] = np.asarray(x[0])[1:, :-1]  # out[i, j] = x[i + 1, j - 1]
    np.testing.assert_array_equal(out[0], expected)
    np.testing.assert_array_equal(out[1], x[1])
    cut = np.asarray(augment.apply(x, {"cutout": jnp.array([[0, 4], [8, 8]])}, "cutout"))
    hole = np.zeros(SHAPE[:2], bool)
    hole[0:2, 2:6] = True  # size 4 centred at (0, 4): rows -2..1 clipped, cols 2..5
    np.testing.assert_array_equal(cut[0], np.where(hole[..., None], 0.0, x[0]))
    hole = np.zeros(SHAPE[:2], bool)
    hole[6:, 6:] = True
    np.testing.assert_array_equal(cut[1], np.where(hole[..., None], 0.0, x[1]))
    assert augment._shift_limit(8) == 1 and augment._cutout_size(8) == 4


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["translation", "color", ALL])
def test_gradient_matches_finite_differences(policy):
    x = images(4)
    params = augment.draw(jax.random.PRNGKey(7), 4, SHAPE, policy)
    weights = jax.random.normal(jax.random.PRNGKey(8), (4, *SHAPE))

    def loss(x):
        return jnp.sum(jnp.sin(augment.apply(x, params, policy)) * weights)

    grad = jax.grad(loss)(x)
    direction = jax.random.normal(jax.random.PRNGKey(9), x.shape)
    eps = 1e-2
    numeric = (loss(x + eps * direction) - loss(x - eps * direction)) / (2 * eps)
    assert float(jnp.vdot(grad, direction)) == pytest.approx(float(numeric), rel=2e-3)


@pytest.mark.slow
def test_generator_gets_gradients_through_the_augmentation():
    gen = MLPGenerator(int(np.prod(SHAPE)), 16, 1, out_shape=SHAPE)
    critic = MLPCritic(16, 1)
    z = jax.random.normal(jax.random.PRNGKey(0), (8, 4))
    g_vars = gen.init(jax.random.PRNGKey(1), z)
    d_vars = critic.init(jax.random.PRNGKey(2), jnp.zeros((8, *SHAPE)))
    params = augment.draw(jax.random.PRNGKey(3), 8, SHAPE, ALL)

    def generator_loss(g_params):
        fake = gen.apply({"params": g_params}, z)
        return -jnp.mean(critic.apply(d_vars, augment.apply(fake, params, ALL)))

    grads = jax.grad(generator_loss)(g_vars["params"])
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(g)) for g in leaves)
    assert all(np.any(g != 0) for g in leaves)


def test_draw_refuses_non_images_and_unknown_names():
    with pytest.raises(ValueError, match="needs images"):
        augment.draw(jax.random.PRNGKey(0), 4, (2,), "color")
    with pytest.raises(ValueError, match="unknown augmentation 'blur'"):
        augment.parse_policy("color,blur")
    assert augment.parse_policy("") == ()


@pytest.mark.parametrize("overrides, key, message", [
    ({"augment": "translation,blur"}, "augment", "unknown augmentation 'blur'"),
    ({"augment": "color,color"}, "augment", "named twice"),
    ({"augment": "color"}, "augment", "needs image data"),
    ({"instance_noise": -1.0}, "instance_noise", ">= 0"),
    ({"dataset_size": -3}, "dataset_size", ">= 0"),
    ({"dataset_size": 100}, "dataset_size", "toy data"),
])
def test_config_errors_name_the_key(overrides, key, message):
    c = get_config_schema()
    apply_overrides(c, overrides)
    with pytest.raises(ConfigError, match=rf"^config\.{key}: .*{message}") as e:
        validate_config(c, 1)
    assert "\n" not in str(e.value)


def test_instance_noise_anneals_linearly_to_exactly_zero():
    total = 7
    sigmas = [float(augment.instance_noise_sigma(0.3, t, total)) for t in range(total)]
    assert sigmas[0] == pytest.approx(0.3) and sigmas[-1] == 0.0
    np.testing.assert_allclose(np.diff(sigmas), -0.05, rtol=1e-5)  # linear
    assert float(augment.instance_noise_sigma(0.3, total + 3, total)) == 0.0
    assert float(augment.instance_noise_sigma(0.3, 0, 1)) == 0.0
    traced = jax.jit(lambda t: augment.instance_noise_sigma(0.3, t, total))
    assert float(traced(jnp.int32(total - 1))) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("overrides, words", [
    (["--config.augment=color,blur"], ["config.augment", "'blur'"]),
    (["--config.model.critic_norm=spectral", "--config.penalty=clip"],
     ["config.model.critic_norm", "clip"]),
])
def test_cli_refuses_in_one_line_and_writes_nothing(overrides, words, tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", "--config=configs/digits.py", f"--workdir={workdir}",
                         *overrides])
    _assert_clean_failure(result, workdir, *words)
