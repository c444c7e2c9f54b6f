"""config.matmul_precision reaches the compiled programs: the train step, evaluation, sampling.

On CPU every setting computes float32 exactly, so the numbers cannot tell the settings apart;
these tests read the plumbing instead: the precision on every matrix product and convolution
of the lowered train step, and the precision in force while the generator of evaluation,
the trainer's progress pictures and `sample` is traced.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from wgan_jax import evaluators, precision, runs
from wgan_jax.config import data_shape, get_config_schema, validate_config
from wgan_jax.errors import ConfigError
from wgan_jax.state import GAN, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import _Sampler, build_gan, replicate, topology_line


def _dcgan_config(conv_impl: str, matmul_precision: str) -> ml_collections.ConfigDict:
    c = get_config_schema()
    c.dataset, c.image_size, c.num_channels = "digits", 8, 1
    c.model.kind, c.model.width, c.model.z_dim = "dcgan", 4, 4
    c.model.generator_norm, c.model.conv_impl = "batch", conv_impl
    c.global_batch_size, c.n_critic = 4, 1
    c.matmul_precision = matmul_precision
    return c


def _products(c: ml_collections.ConfigDict) -> list[str]:
    """The dot_general and convolution lines of the lowered train step of `c`."""
    gan, shape = build_gan(c), data_shape(c)
    state = jax.eval_shape(lambda: create_train_state(gan, shape, 0, False))
    real = jax.ShapeDtypeStruct((c.n_critic, c.global_batch_size, *shape), np.float32)
    step = make_train_step(StepConfig.from_config(c), make_mesh(jax.devices()[:1]), gan)
    text = step.lower(state, real).as_text()
    return [line for line in text.splitlines()
            if "stablehlo.dot_general" in line or "stablehlo.convolution" in line]


@pytest.mark.parametrize("conv_impl", ["xla", "matmul"])
def test_train_step_carries_the_stated_precision(conv_impl):
    ops = {p: _products(_dcgan_config(conv_impl, p)) for p in precision.PRECISIONS}
    # The DCGAN step has products and convolutions (forward, backward, the penalty's double
    # backward), the same number at every setting.
    assert len(ops["default"]) > 10
    assert len({len(v) for v in ops.values()}) == 1
    assert not any("HIGH" in line for line in ops["default"])
    assert all("precision HIGHEST" in line or "[HIGHEST, HIGHEST]" in line
               for line in ops["highest"])
    assert all("precision HIGH>" in line or "[HIGH, HIGH]" in line for line in ops["high"])


def test_a_global_setting_does_not_override_the_config():
    with jax.default_matmul_precision("highest"):
        ops = _products(_dcgan_config("xla", "default"))
    assert ops and not any("HIGH" in line for line in ops)


def _toy_metrics(matmul_precision: str) -> dict[str, float]:
    c = get_config_schema()
    c.model.width, c.global_batch_size, c.n_critic = 32, 16, 2
    c.matmul_precision = matmul_precision
    mesh, shape = make_mesh(jax.devices()[:1]), data_shape(c)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, shape, 0, False), mesh)
    real = np.random.default_rng(0).normal(size=(2, 16, *shape)).astype(np.float32)
    _, metrics = make_train_step(StepConfig.from_config(c), mesh, gan)(state, real)
    return {k: float(v) for k, v in metrics.items()}


@pytest.mark.slow
def test_cpu_computes_float32_exactly_at_every_setting():
    """docs/accelerators.md: on CPU the settings give the same numbers, bit for bit."""
    if jax.default_backend() != "cpu":
        pytest.skip("the claim is about XLA:CPU")
    assert _toy_metrics("default") == _toy_metrics("highest")


def test_bad_values_are_config_errors():
    c = get_config_schema()
    c.matmul_precision = "float32"
    with pytest.raises(ConfigError, match=r"config\.matmul_precision: must be one of default, "
                       r"high, highest; got 'float32'"):
        validate_config(c, 1)
    with pytest.raises(ConfigError, match="StepConfig.matmul_precision='tf32'"):
        StepConfig(matmul_precision="tf32")
    with pytest.raises(ValueError, match="expected one of default, high, highest"):
        with precision.scope("fastest"):
            pass


def test_topology_line_states_the_precision():
    c = get_config_schema()
    c.matmul_precision, c.compute_dtype = "highest", "bfloat16"
    line = topology_line(c, make_mesh(jax.devices()[:1]))
    assert line.endswith("compute_dtype=bfloat16 matmul_precision=highest")


class _Spy:
    """A generator `(init, apply)` that records the matmul precision in force when traced."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def init(self, rng, z):
        return {"w": jnp.ones((z.shape[-1], 2))}, {}

    def apply(self, params, state, z, *, train, rng=None):
        self.seen.append(jax.config.jax_default_matmul_precision)
        return z @ params["w"], state


def _spy_gan() -> tuple[GAN, _Spy, object]:
    spy = _Spy()
    critic = (lambda rng, x: ({"v": jnp.ones((2,))}, {}),
              lambda p, s, x, *, train, rng=None: (x @ p["v"], s))
    gan = GAN((spy.init, spy.apply), critic, optax.adam(1e-3), optax.adam(1e-3), z_dim=3)
    state = create_train_state(gan, (2,), 0, False)
    spy.seen.clear()  # the door's shape checks traced it too (at no stated precision)
    return gan, spy, state


def test_evaluation_samples_at_the_configs_precision():
    gan, spy, state = _spy_gan()
    c = get_config_schema()
    c.matmul_precision = "highest"
    evaluator = lambda samples: {"eval/n": float(len(samples))}  # noqa: E731
    spec = evaluators.EvalSpec.from_config(c)
    assert evaluators.evaluate_state(spec, gan, state, evaluator=evaluator, num_samples=5) == {
        "eval/n": 5.0}
    assert spy.seen == ["highest"]


def test_sample_and_progress_pictures_at_the_runs_precision(tmp_path):
    gan, spy, state = _spy_gan()
    assert runs.generate_samples(gan, state, 4, seed=0, matmul_precision="high").shape == (4, 2)
    assert runs.generate_samples(gan, state, 4, seed=0, truncation=1.0,
                                 matmul_precision="highest").shape == (4, 2)
    c = get_config_schema()
    c.matmul_precision, c.dataset, c.model.kind = "highest", "toy:ring8", "mlp"
    sampler = _Sampler(gan, c, np.zeros((10, 2), np.float32))
    assert sampler.save(gan, state, 1, str(tmp_path), None).endswith("step_0000001.png")
    assert spy.seen == ["high", "highest", "highest"]
