"""Class-conditional GANs (`model.conditional = "projection"`): data, models, step, refusals."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_json

from wgan_jax.config import apply_overrides, get_config_schema, validate_config
from wgan_jax.errors import ConfigError

DIGITS = {"dataset": "digits", "num_channels": 1, "model.width": 8, "model.z_dim": 8,
          "model.generator_norm": "batch", "global_batch_size": 16, "n_critic": 2,
          "model.conditional": "projection"}
CASES = {
    "dcgan_8px": {**DIGITS, "model.kind": "dcgan", "image_size": 8},
    "mlp_8px": {**DIGITS, "model.kind": "mlp", "image_size": 8},
    "resnet_16px": {**DIGITS, "model.kind": "resnet", "image_size": 16},
}


def _config(overrides: dict):
    c = get_config_schema()
    apply_overrides(c, overrides)
    return c


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
    freq = tuple(np.arange(1.0, 11.0) / 55.0)
    step = make_train_step(StepConfig.from_config(c, freq), mesh, gan)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (c.n_critic, c.global_batch_size, *shape)).astype(np.float32)
    labels = rng.integers(0, 10, (c.n_critic, c.global_batch_size)).astype(np.int32)
    real = (jax.device_put(images, sharding), jax.device_put(labels, sharding))
    state, metrics = step(state, real)
    results[name] = {k: float(v) for k, v in metrics.items()}
print(json.dumps(results))
"""


# The labels' split over devices and the fake labels' draw are the same for every kind: the
# MLP's 1-vs-8 compiles would repeat the convolutional ones' check.
ACROSS_DEVICES = ("dcgan_8px", "resnet_16px")


@pytest.fixture(scope="module")
def first_iterations():
    cases = {k: CASES[k] for k in ACROSS_DEVICES}
    return {devices: run_json(RUN, json.dumps(cases), devices=devices) for devices in (1, 8)}


@pytest.mark.slow
@pytest.mark.parametrize("case", ACROSS_DEVICES)
def test_first_iteration_equal_on_one_and_eight_devices(case, first_iterations):
    one, eight = first_iterations[1][case], first_iterations[8][case]
    for key in ("critic_loss", "generator_loss", "gradient_penalty", "wasserstein_estimate",
                "grad_norm/critic", "grad_norm/generator"):
        np.testing.assert_allclose(one[key], eight[key], rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_and_samples_depend_on_the_label(case):
    from wgan_jax.train import build_gan

    c = _config(CASES[case])
    gan = build_gan(c)
    assert gan.num_classes == 10
    size = c.image_size
    x = jax.random.uniform(jax.random.PRNGKey(1), (4, size, size, 1), minval=-1.0, maxval=1.0)
    z = jax.random.normal(jax.random.PRNGKey(2), (4, c.model.z_dim))
    zeros, threes = jnp.zeros((4,), jnp.int32), jnp.full((4,), 3, jnp.int32)
    d_params, d_state = gan.critic.init(jax.random.PRNGKey(3), (x, zeros))
    score = lambda y: gan.critic.apply(d_params, d_state, (x, y), train=False)[0]  # noqa: E731
    s0, s3 = score(zeros), score(threes)
    assert s0.shape == (4,)
    assert np.all(np.abs(np.asarray(s0 - s3)) > 1e-6)
    # Projection: the label enters only through <embed(y), phi(x)>, so with equal embeddings
    # the label cannot matter.
    same = jax.tree.map(lambda a: a, d_params)
    same["class_embed"]["embedding"] = jnp.ones_like(same["class_embed"]["embedding"])
    equal = [gan.critic.apply(same, d_state, (x, y), train=False)[0] for y in (zeros, threes)]
    np.testing.assert_array_equal(equal[0], equal[1])
    g_params, g_state = gan.generator.init(jax.random.PRNGKey(4), (z, zeros))

    def label_effect(params) -> float:
        fakes = [gan.generator.apply(params, g_state, (z, y), train=False)[0]
                 for y in (zeros, threes)]
        return float(jnp.max(jnp.abs(fakes[0] - fakes[1])))

    # Every generator gets a label embedding concatenated to z, live from initialisation.
    assert g_params["class_embed"]["embedding"].shape == (10, c.model.z_dim)
    assert label_effect(g_params) > 1e-4
    equal_rows = jax.tree.map(lambda a: a, g_params)
    equal_rows["class_embed"]["embedding"] = jnp.ones_like(g_params["class_embed"]["embedding"])
    if c.model.kind == "mlp":  # the embedding is its only label input
        assert label_effect(equal_rows) == 0.0
        return
    # Conv generators: the label also enters through conditional BatchNorm (initially the
    # same gain and bias for every class); change class 3's bias and the label matters again.
    assert label_effect(equal_rows) == 0.0
    scope = equal_rows if c.model.kind == "dcgan" else equal_rows["block_0"]
    bias = scope["ConditionalBatchNorm_0"]["bias"]["embedding"]
    scope["ConditionalBatchNorm_0"]["bias"]["embedding"] = bias.at[3].set(1.0)
    assert label_effect(equal_rows) > 1e-4


@pytest.mark.slow
def test_fake_labels_follow_the_class_frequencies():
    from wgan_jax.step import StepConfig, draw_labels

    one_class = StepConfig(class_frequencies=(0.0,) * 7 + (1.0, 0.0, 0.0), n_critic=3)
    y_critic, y_gen = draw_labels(one_class, jax.random.PRNGKey(0), 64)
    assert y_critic.shape == (3, 64) and y_gen.shape == (64,)
    assert np.all(np.asarray(y_critic) == 7) and np.all(np.asarray(y_gen) == 7)
    skewed = StepConfig(class_frequencies=(0.5, 0.5) + (0.0,) * 8, n_critic=1)
    y_critic, _ = draw_labels(skewed, jax.random.PRNGKey(1), 4000)
    counts = np.bincount(np.asarray(y_critic).ravel(), minlength=10)
    assert counts[2:].sum() == 0 and abs(counts[0] / 4000 - 0.5) < 0.05


def test_conditional_batches_carry_the_examples_labels():
    from wgan_jax import input_pipeline
    from wgan_jax.data.digits import digits_images
    from wgan_jax.data.spec import DataSpec
    from wgan_jax.step import make_mesh

    overrides = {**CASES["mlp_8px"], "dataset_size": 300}
    mesh = make_mesh()
    it = input_pipeline.create_input_pipeline(DataSpec.from_config(_config(overrides)), mesh)
    plain = input_pipeline.create_input_pipeline(DataSpec.from_config(
        _config({**overrides, "model.conditional": "none"})), mesh)
    images, labels = next(it)
    np.testing.assert_array_equal(np.asarray(images), np.asarray(next(plain)))  # same images
    assert labels.dtype == jnp.int32 and labels.shape == images.shape[:2]
    grey, source_labels = digits_images(8)
    pixels = np.rint((np.asarray(images)[..., 0] + 1.0) * 127.5).astype(np.uint8)
    for image, label in zip(pixels.reshape(-1, 8, 8), np.asarray(labels).ravel(), strict=True):
        matches = np.flatnonzero(np.all(grey == image, axis=(1, 2)))
        assert label in source_labels[matches]
    assert len(it.class_frequencies) == 10 and abs(sum(it.class_frequencies) - 1.0) < 1e-9
    assert plain.class_frequencies == ()


@pytest.mark.parametrize("overrides, words", [
    ({"dataset": "toy:8gaussians", "model.kind": "mlp"}, ["toy:8gaussians", "labels"]),
    ({"dataset": "folder:/some/folder"}, ["folder:/some/folder", "folder_classes"]),
    ({"model.kind": "dcgan", "image_size": 16, "model.generator_norm": "none"},
     ["generator_norm"]),
    ({"model.kind": "resnet", "image_size": 16, "model.generator_norm": "none"},
     ["resnet", "generator_norm"]),
])
def test_conditional_refusals_name_the_key(overrides, words):
    c = _config({**CASES["dcgan_8px"], **overrides})
    with pytest.raises(ConfigError) as error:
        validate_config(c, 1)
    message = str(error.value)
    assert message.startswith("config.model.conditional:") and "\n" not in message
    for word in words:
        assert word in message, message
    with pytest.raises(ConfigError, match="model.conditional"):
        validate_config(_config({**CASES["dcgan_8px"], "model.conditional": "concat"}), 1)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """300 iterations of a conditional MLP WGAN-GP on 8 px digits (~20 CPU-seconds)."""
    from wgan_jax.default_config import get_config
    from wgan_jax.train import train_and_evaluate

    c = get_config()
    apply_overrides(c, {
        "image_size": 8, "model.kind": "mlp", "model.width": 128, "model.depth": 2,
        "model.z_dim": 16, "model.generator_norm": "none", "model.conditional": "projection",
        "num_iterations": 300, "n_critic": 2, "global_batch_size": 64, "generator_lr": 1e-3,
        "critic_lr": 1e-3, "sample_every": 0, "plot_every": 0, "checkpoint_every": 0})
    workdir = str(tmp_path_factory.mktemp("conditional") / "run")
    train_and_evaluate(c, workdir)
    return workdir


@pytest.mark.slow
def test_sample_labels_are_classified_as_asked(trained_run, tmp_path):
    from conftest import run_module

    from wgan_jax.metrics.digits_classifier import DigitClassifier

    out = tmp_path / "s.npy"
    result = run_module(["wgan_jax.sample", f"--workdir={trained_run}", "--num=30",
                         "--labels=0,1,2,3,4,5,6,7,8,9", f"--out={out}"])
    assert result.returncode == 0, result.stderr[-2000:]
    samples = np.load(out)
    assert samples.shape == (300, 8, 8, 1)
    predicted = DigitClassifier.train().predict(samples)
    accuracy = float(np.mean(predicted == np.repeat(np.arange(10), 30)))
    # A generator that ignored its labels would be right about 10% of the time; 300
    # iterations reach ~90%.
    assert accuracy > 0.6, accuracy
    grid = tmp_path / "g.png"
    result = run_module(["wgan_jax.sample", f"--workdir={trained_run}", "--num=5",
                         "--labels=3,7", f"--out={grid}"])
    assert result.returncode == 0, result.stderr[-2000:]
    from PIL import Image

    width, height = Image.open(grid).size
    assert width > 2 * height  # 5 columns of samples, 2 rows (one class each)


@pytest.mark.slow
def test_asking_for_a_class_the_run_does_not_have_is_refused(trained_run):
    from wgan_jax import runs
    from wgan_jax.errors import UserError

    plain = runs.build_gan(_config({**CASES["mlp_8px"], "model.conditional": "none"}))
    with pytest.raises(UserError, match="not class-conditional"):
        runs.generate_class_samples(plain, None, 2, 0, [3])
    _, gan, state, _ = runs.load_run(trained_run)
    with pytest.raises(UserError, match="class 10 is not one of this run's classes 0..9"):
        runs.generate_class_samples(gan, state, 2, 0, [3, 10])
    samples = runs.generate_class_samples(gan, state, 4, 0, [3, 3, 7])
    np.testing.assert_array_equal(samples[:4], samples[4:8])  # deterministic for a seed
    assert np.max(np.abs(samples[:4] - samples[8:])) > 0.1  # same latents, another class
