"""`sample --truncation PSI` and `sample --interpolate STEPS` on a tiny trained image run."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest
from conftest import run_module
from test_bad_input import _assert_clean_failure

from wgan_jax import runs
from wgan_jax.config import apply_overrides, data_shape, get_config_schema
from wgan_jax.errors import UserError
from wgan_jax.state import create_train_state


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """2 iterations of an 8 px digits DCGAN, trained with DiffAugment and instance noise."""
    workdir = str(tmp_path_factory.mktemp("sample") / "run")
    result = run_module([
        "wgan_jax.main", f"--workdir={workdir}", "--config.dataset=digits",
        "--config.image_size=8", "--config.num_channels=1", "--config.model.kind=dcgan",
        "--config.model.width=8", "--config.model.z_dim=16", "--config.global_batch_size=16",
        "--config.n_critic=1", "--config.num_iterations=2", "--config.sample_every=0",
        "--config.eval_every=0", "--config.augment=translation,cutout,color",
        "--config.instance_noise=0.1",
    ])
    assert result.returncode == 0, result.stderr[-2000:]
    return workdir


def _sample(workdir: str, *args: str):
    result = run_module(["wgan_jax.sample", f"--workdir={workdir}", *args])
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.mark.slow
def test_truncation_is_deterministic_and_changes_the_samples(trained, tmp_path):
    paths = [str(tmp_path / f"{name}.npy") for name in ("a", "b", "plain")]
    _sample(trained, "--num=6", "--seed=3", "--truncation=0.5", f"--out={paths[0]}")
    _sample(trained, "--num=6", "--seed=3", "--truncation=0.5", f"--out={paths[1]}")
    _sample(trained, "--num=6", "--seed=3", f"--out={paths[2]}")
    a, b, plain = (np.load(p) for p in paths)
    assert a.shape == (6, 8, 8, 1)
    np.testing.assert_array_equal(a, b)
    assert np.max(np.abs(a - plain)) > 1e-3


@pytest.mark.slow
def test_jacobian_truncation_keeps_the_smoothest_latents_and_says_so(trained, tmp_path):
    from wgan_jax import jacobian_truncation, sampling

    out = str(tmp_path / "smooth.npy")
    result = _sample(trained, "--num=6", "--seed=3", "--jacobian_truncation=0.5", f"--out={out}")
    assert "Jacobian truncation: 50.0% of latents dropped" in result.stdout
    run = runs.load_run(trained)
    candidates = runs.block_latents(3, 0, 12, run.gan.z_dim)
    norms = jacobian_truncation.jacobian_sq_norms(run.gan, run.state, candidates, False)
    kept = np.asarray(candidates)[np.sort(np.argsort(norms)[:6])]
    expected = sampling.generate_from_latents(run.gan, run.state, kept, False)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)


@pytest.mark.slow
def test_interpolation_gif_has_steps_frames_and_png_a_grid(trained, tmp_path):
    from PIL import Image

    gifs = [str(tmp_path / f"{name}.gif") for name in ("a", "b")]
    for gif in gifs:
        result = _sample(trained, "--interpolate=5", "--rows=2", "--seed=1", f"--out={gif}")
        assert "2 interpolations of 5 steps" in result.stdout
    with open(gifs[0], "rb") as f, open(gifs[1], "rb") as g:
        assert f.read() == g.read()  # deterministic for a seed
    with Image.open(gifs[0]) as image:
        assert image.n_frames == 5
    png = str(tmp_path / "grid.png")
    _sample(trained, "--interpolate=5", "--rows=2", "--truncation=0.7", f"--out={png}")
    with Image.open(png) as image:
        width, height = image.size
    assert 2.0 < width / height < 3.0  # 5 columns of steps, 2 rows of interpolations


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (["--truncation=0"], ["--truncation", "> 0"]),
    (["--truncation=-0.5"], ["--truncation", "> 0"]),
    (["--interpolate=4", "--out={tmp}/x.npy"], ["--out", ".png or .gif"]),
    (["--interpolate=1", "--out={tmp}/x.gif"], ["--interpolate", ">= 2"]),
    (["--interpolate=4", "--num=3", "--out={tmp}/x.gif"], ["--num", "--rows"]),
    (["--rows=3"], ["--rows", "--interpolate"]),
    (["--jacobian_truncation=1"], ["--jacobian_truncation", "[0, 1)"]),
])
def test_bad_values_exit_2_with_one_line_and_write_nothing(trained, tmp_path, args, words):
    args = [a.format(tmp=tmp_path) for a in args]
    if not any(a.startswith("--out") for a in args):
        args.append(f"--out={tmp_path}/x.npy")
    result = run_module(["wgan_jax.sample", f"--workdir={trained}", *args])
    _assert_clean_failure(result, str(tmp_path / "x"), words)
    assert os.listdir(tmp_path) == []


def test_interpolating_a_toy_run_is_refused_before_writing(tmp_path):
    c = get_config_schema()
    apply_overrides(c, {"model.width": 8})
    gan = runs.build_gan(c)
    state = jax.device_get(create_train_state(gan, data_shape(c), 0, False))
    run = runs.Run(c, gan, state, 0)
    with pytest.raises(UserError, match="not image data"):
        runs.write_interpolation(run, str(tmp_path / "x.gif"), 4, 0)
    with pytest.raises(UserError, match=r"\.png or \.gif"):
        runs.write_interpolation(run, str(tmp_path / "x.jpg"), 4, 0)
    assert os.listdir(tmp_path) == []
