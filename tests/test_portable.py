"""`wgan_jax.portable`: a run's generator as a `jax.export` program, in process.

The program must compute what `sample` computes (`runs.iter_samples`, the generator `sample`
streams to its .npy) bit for bit on CPU for the same latents; the command and the round trip
through a virtual environment holding only jax are `tests/test_export_cli.py`.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from wgan_jax import portable, runs
from wgan_jax.config import apply_overrides, data_shape, get_config_schema
from wgan_jax.errors import UserError
from wgan_jax.models.contract import Model
from wgan_jax.state import create_train_state

TINY = {"dataset": "digits", "image_size": 8, "num_channels": 1, "model.kind": "dcgan",
        "model.width": 8, "model.z_dim": 8, "model.generator_norm": "batch", "ema_decay": 0.9}


def _run(**overrides) -> runs.Run:
    """An 8 px DCGAN run in memory whose weights, BatchNorm statistics and EMA weights are all
    different random values (the statistics far from their initial 0 and 1, so that a
    generator in training mode, or without them, gives other samples)."""
    config = get_config_schema()
    apply_overrides(config, {**TINY, **overrides})
    gan = runs.build_gan(config)
    state = create_train_state(gan, data_shape(config), 0, True)
    leaves, tree = jax.tree.flatten(state.g_state)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    stats = [jnp.abs(jax.random.normal(k, x.shape)) + 0.5 for k, x in zip(keys, leaves,
                                                                          strict=True)]
    state = state.replace(g_state=jax.tree.unflatten(tree, stats),
                          ema_params=jax.tree.map(lambda p: 0.9 * p + 0.01, state.g_params))
    return runs.Run(config, gan, state, 7)


@pytest.fixture(scope="module")
def run() -> runs.Run:
    return _run()


def _load(exported: portable.PortableGenerator) -> export.Exported:
    return export.deserialize(bytearray(exported.program))


def _sample(run: runs.Run, num: int, seed: int, use_ema: bool = False, **kwargs) -> np.ndarray:
    """What `sample --num num --seed seed [--ema]` writes."""
    return np.concatenate(list(runs.iter_samples(
        run.gan, run.state, num, seed, use_ema, matmul_precision=run.config.matmul_precision,
        **kwargs)))


@pytest.mark.parametrize("use_ema", [False, True], ids=["weights", "ema"])
def test_the_program_equals_sample_bit_for_bit_at_two_batch_sizes(run, use_ema):
    program = _load(portable.export_generator(run, use_ema=use_ema))
    assert program.nr_devices == 1 and program.platforms == ("cpu", "cuda", "tpu")
    for num, seed in ((3, 0), (11, 5)):
        z = jax.random.normal(jax.random.PRNGKey(seed), (num, run.gan.z_dim))  # docs/export.md
        np.testing.assert_array_equal(z, runs.block_latents(seed, 0, num, run.gan.z_dim))
        out = np.asarray(program.call(z))
        assert out.dtype == np.float32 and out.shape == (num, 8, 8, 1)
        np.testing.assert_array_equal(out, _sample(run, num, seed, use_ema))
    other = np.asarray(program.call(runs.block_latents(5, 0, 11, run.gan.z_dim)))
    assert np.max(np.abs(other - _sample(run, 11, 5, not use_ema))) > 1e-3  # weights differ


def test_batchnorm_runs_on_the_running_statistics(run):
    """Inference mode: a sample does not depend on the others in its batch (training mode
    would normalise with the batch's statistics), and the stored statistics are used."""
    program = _load(portable.export_generator(run, platforms=("cpu",)))
    z = runs.block_latents(0, 0, 4, run.gan.z_dim)
    alone = np.asarray(program.call(z[:1]))
    np.testing.assert_allclose(alone[0], np.asarray(program.call(z))[0], atol=1e-6)
    fresh = run.state.replace(g_state=create_train_state(
        run.gan, data_shape(run.config), 0, False).g_state)
    initial = _load(portable.export_generator(run._replace(state=fresh), platforms=("cpu",)))
    assert np.max(np.abs(np.asarray(initial.call(z)) - np.asarray(program.call(z)))) > 1e-3


def test_truncated_latents_drawn_with_jax_alone_are_sample_truncation():
    """docs/export.md draws `sample --truncation PSI`'s latents with jax.random."""
    z = jax.random.truncated_normal(jax.random.PRNGKey(4), -0.5, 0.5, (6, 8), jnp.float32)
    np.testing.assert_array_equal(z, runs.block_latents(4, 0, 6, 8, truncation=0.5))


def test_a_conditional_program_takes_labels(tmp_path):
    run = _run(**{"model.conditional": "projection", "model.num_classes": 10})
    exported = portable.export_generator(run, platforms=("cpu",))
    program = _load(exported)
    assert [len(a.shape) for a in program.in_avals] == [2, 1]
    z = runs.block_latents(2, 0, 5, 8)
    for label in (3, 7):
        out = program.call(z, jnp.full((5,), label, jnp.int32))
        np.testing.assert_array_equal(out, _sample(run, 5, 2, labels=[label]))
    meta = exported.metadata
    assert meta["num_classes"] == 10 and [i["name"] for i in meta["inputs"]] == ["z", "labels"]
    assert meta["call"].endswith(".call(z, labels)")


def test_auto_convolutions_are_resolved_for_each_platform(run):
    """"auto" is "matmul" on CPU (no convolution ops), "s2d" on GPUs (stride-1 convolutions)
    and "xla" on TPUs: the program holds one variant per distinct trace and XLA picks the
    platform's."""
    def convolutions(platforms: tuple[str, ...]) -> tuple[int, list]:
        exported = portable.export_generator(run, platforms=platforms)
        text = _load(exported).mlir_module()
        return text.count("stablehlo.convolution"), exported.metadata["platform_variants"]

    assert convolutions(("cpu",)) == (0, [["cpu"]])
    tpu, variants = convolutions(("tpu",))
    assert tpu > 0 and variants == [["tpu"]]
    both, variants = convolutions(("cpu", "cuda", "tpu"))
    assert both > tpu and variants == [["cpu"], ["cuda"], ["tpu"]]
    meta = portable.export_generator(run).metadata
    assert meta["conv_impl"] == {"cpu": "matmul", "cuda": "s2d", "tpu": "xla"}


def test_an_explicit_conv_impl_is_one_variant_for_every_platform():
    exported = portable.export_generator(_run(**{"model.conv_impl": "xla"}))
    assert exported.metadata["platform_variants"] == [["cpu", "cuda", "tpu"]]
    assert exported.metadata["conv_impl"] == {"cpu": "xla", "cuda": "xla", "tpu": "xla"}


@pytest.fixture(scope="module")
def toy() -> runs.Run:
    """A 2-D toy run whose config samples with Jacobian truncation."""
    return _run(**{"dataset": "toy:ring8", "model.kind": "mlp", "model.width": 8,
                   "sampling.jacobian_truncation": 0.02})


def _with(run: runs.Run, **values) -> runs.Run:
    """`run` with config values changed (its networks and state as they are)."""
    config = run.config.copy_and_resolve_references()
    apply_overrides(config, values)
    return run._replace(config=config)


@pytest.mark.parametrize("precision, highest", [("default", False), ("highest", True)])
def test_the_program_carries_the_runs_matmul_precision(toy, precision, highest):
    exported = portable.export_generator(_with(toy, matmul_precision=precision),
                                         platforms=("tpu",))
    assert ("HIGHEST" in _load(exported).mlir_module()) == highest
    assert exported.metadata["matmul_precision"] == precision


def test_the_metadata_says_how_to_call_it(run, toy):
    exported = portable.export_generator(run, batch=4)
    meta = exported.metadata
    assert meta["format"] == portable.FORMAT and meta["batch"] == 4
    assert meta["inputs"] == [{"name": "z", "shape": [4, 8], "dtype": "float32",
                               "about": "latents; training drew them from N(0, I)"}]
    assert meta["output"]["shape"] == [4, 8, 8, 1] and meta["output"]["range"] == [-1.0, 1.0]
    assert meta["checkpoint_step"] == 7 and meta["ema"] is False and meta["z_dim"] == 8
    assert meta["platforms"] == ["cpu", "cuda", "tpu"] and meta["jax_version"] == jax.__version__
    assert meta["config_sha256"] == portable.config_digest(run.config)
    wider = _with(run, **{"model.width": 4}).config
    assert meta["config_sha256"] != portable.config_digest(wider)
    assert meta["program_bytes"] == len(exported.program)
    assert _load(exported).in_avals[0].shape == (4, 8)
    assert meta["jacobian_truncation"]["run"] == 0.0
    output = portable.export_generator(toy, platforms=("cpu",)).metadata["output"]
    assert output["shape"] == ["batch", 2] and output["range"] is None


def test_a_runs_jacobian_truncation_is_stated_not_applied(toy):
    meta = portable.export_generator(toy, platforms=("cpu",)).metadata
    assert meta["conv_impl"] is None  # an MLP
    truncation = meta["jacobian_truncation"]
    assert truncation["run"] == 0.02 and truncation["in_program"] is False
    assert "drop latents" in truncation["about"]


def test_write_puts_the_program_and_its_metadata_side_by_side(run, tmp_path):
    exported = portable.export_generator(run, platforms=("cpu",))
    path = str(tmp_path / "out" / "g.jaxexport")
    exported.write(path)
    with open(path, "rb") as f:
        assert f.read() == exported.program
    with open(portable.metadata_path(path)) as f:
        assert json.load(f) == exported.metadata
    assert sorted(os.listdir(tmp_path / "out")) == ["g.jaxexport", "g.jaxexport.json"]


def test_a_failed_write_leaves_nothing(run, tmp_path):
    exported = portable.export_generator(run, platforms=("cpu",))
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="nothing was written"):
        exported.write(str(tmp_path / "file" / "g.jaxexport"))
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.parametrize("text, expected", [("cpu", ("cpu",)), ("tpu, cpu,tpu", ("tpu", "cpu")),
                                            ("cpu,cuda,rocm,tpu", portable.PLATFORMS)])
def test_parse_platforms(text, expected):
    assert portable.parse_platforms(text) == expected


@pytest.mark.parametrize("text", ["cpu,metal", "", "gpu"])
def test_an_unknown_platform_names_the_accepted_ones(text):
    with pytest.raises(ValueError, match="expected one or more of cpu, cuda, rocm, tpu"):
        portable.parse_platforms(text)


def test_refusals(run):
    with pytest.raises(UserError, match="platforms: 'metal' is not a platform"):
        portable.export_generator(run, platforms=("cpu", "metal"))
    with pytest.raises(UserError, match="batch must be >= 1"):
        portable.export_generator(run, batch=0)
    no_ema = run._replace(state=run.state.replace(ema_params=None))
    with pytest.raises(UserError, match="no EMA generator weights"):
        portable.export_generator(no_ema, use_ema=True)


def test_a_generator_without_a_symbolic_batch_is_told_to_fix_one():
    """A network whose shapes need a concrete batch size (here a numpy array of it)."""
    def init(rng, z):
        return {"w": jnp.ones((z.shape[1], 2))}, {}

    def apply(params, state, z, *, train, rng=None):
        return z @ params["w"] + np.zeros((z.shape[0], 1), np.float32), state

    run = _run(**{"dataset": "toy:ring8", "model.kind": "mlp"})
    run = run._replace(gan=runs.build_gan(run.config, generator=Model(init, apply)))
    run = run._replace(state=create_train_state(run.gan, (2,), 0, False))
    with pytest.raises(UserError, match=r"symbolic batch size .*export --batch N"):
        portable.export_generator(run, platforms=("cpu",))
    program = _load(portable.export_generator(run, platforms=("cpu",), batch=3))
    np.testing.assert_array_equal(program.call(jnp.ones((3, 8))), np.full((3, 2), 8.0))
