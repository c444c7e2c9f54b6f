"""Your own networks, named by `model.generator` / `model.critic`, in every command.

The networks live in `tests/own_nets.py`, a stand-in for a user's package: the command-line
runs use `tests/` as their working directory so that `own_nets:FACTORY` imports, as a user's
package on their PYTHONPATH would.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from conftest import REPO, run_module

from wgan_jax import runs
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.errors import ConfigError
from wgan_jax.train import train_and_evaluate

pytestmark = pytest.mark.slow  # subprocesses or whole runs

TESTS = os.path.dirname(os.path.abspath(__file__))
TINY = {
    "dataset": "digits", "image_size": 8, "num_channels": 1, "global_batch_size": 16,
    "n_critic": 2, "num_iterations": 4, "log_every": 1, "sample_every": 0, "plot_every": 0,
    "checkpoint_every": 2, "model.kind": "mlp", "model.z_dim": 8, "model.width": 32,
    "penalty_weight": 10.0, "diagnostics.level": "basic",
}
FIRST_ROW_KEYS = ("critic_loss", "generator_loss", "wasserstein_estimate", "gradient_penalty",
                  "grad_norm/critic", "grad_norm/generator")


def _flags(workdir: str, generator: str, critic: str, **overrides) -> list[str]:
    values = {**TINY, "model.generator": generator, "model.critic": critic, **overrides}
    return [f"--config={REPO}/configs/digits.py", f"--workdir={workdir}",
            *(f"--config.{key}={value}" for key, value in values.items())]


def _cli(args: list[str], devices: int = 1):
    """`python -m ...` run from tests/, where `own_nets` imports."""
    return run_module(args, devices=devices, cwd=TESTS)


def _ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _rows(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _checkpoint_tree(workdir: str, step: int) -> dict[tuple[str, ...], tuple[int, ...]]:
    """{key path: shape} of the saved state, from orbax's metadata alone (not through our
    own restore, which would rebuild the structure from the same factories)."""
    import jax
    import orbax.checkpoint as ocp

    path = os.path.join(workdir, "checkpoints", str(step), "state")
    tree = dict(ocp.StandardCheckpointer().metadata(path).item_metadata)
    leaves = jax.tree_util.tree_leaves_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))
    return {tuple(str(getattr(k, "key", k)) for k in key): tuple(leaf.shape)
            for key, leaf in leaves}


def _params(tree: dict, collection: str) -> dict[tuple[str, ...], tuple[int, ...]]:
    return {k[1:]: v for k, v in tree.items() if k[0] == collection}


def _config(**overrides):
    c = get_config_schema()
    apply_overrides(c, {**TINY, **overrides})
    return c


def test_nnx_networks_on_1_and_8_devices_then_every_command(tmp_path):
    nets = ("own_nets:nnx_generator", "own_nets:nnx_critic")
    one, eight = str(tmp_path / "one"), str(tmp_path / "eight")
    _ok(_cli(["wgan_jax.main", *_flags(one, *nets)], devices=1))
    _ok(_cli(["wgan_jax.main", *_flags(eight, *nets)], devices=8))

    # The same numbers on 1 and 8 devices in the first iteration (BatchNorm over "data").
    first_one, first_eight = _rows(one)[0], _rows(eight)[0]
    assert first_one["step"] == first_eight["step"] == 1
    for key in FIRST_ROW_KEYS:
        assert math.isclose(first_one[key], first_eight[key], rel_tol=1e-4, abs_tol=1e-7), (
            key, first_one[key], first_eight[key])

    # The checkpoint holds the user's layers (names and shapes), BatchNorm statistics included.
    tree = _checkpoint_tree(eight, 4)
    assert _params(tree, "g_params") == {
        ("my_hidden", "kernel"): (8, 32), ("my_norm", "scale"): (32,), ("my_norm", "bias"): (32,),
        ("my_pixels", "kernel"): (32, 64), ("my_pixels", "bias"): (64,)}
    assert _params(tree, "g_state") == {("my_norm", "mean"): (32,), ("my_norm", "var"): (32,)}
    assert _params(tree, "d_params") == {
        ("my_features", "kernel"): (64, 32), ("my_features", "bias"): (32,),
        ("my_score", "kernel"): (32, 1), ("my_score", "bias"): (1,)}

    # sample, evaluate and diagnose rebuild the networks from the run's config.json alone.
    out = str(tmp_path / "samples.npy")
    result = _ok(_cli(["wgan_jax.sample", f"--workdir={eight}", "--num=5", f"--out={out}"]))
    assert "checkpoint 4" in result.stdout
    samples = np.load(out)
    assert samples.shape == (5, 8, 8, 1) and np.all(np.abs(samples) <= 1)
    result = _ok(_cli(["wgan_jax.evaluate", f"--workdir={eight}", "--num=50", "--json"]))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["step"] == 4 and report["metrics"]
    result = _cli(["wgan_jax.diagnose", f"--workdir={eight}", "--json"])
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert json.loads(result.stdout)["last_step"] == 4

    # Resume: two more iterations continue from checkpoint 4 with the same networks.
    result = _ok(_cli(["wgan_jax.main", *_flags(eight, *nets, num_iterations=6)], devices=8))
    assert "resuming from checkpoint 4" in result.stderr
    assert [r["step"] for r in _rows(eight) if "critic_loss" in r][-2:] == [5, 6]
    assert _params(_checkpoint_tree(eight, 6), "g_params") == _params(tree, "g_params")


@pytest.mark.parametrize("kind, g_names, d_names", [
    ("linen", {("my_linen_hidden", "kernel"), ("my_linen_norm", "scale"),
               ("my_linen_norm", "bias"), ("my_linen_pixels", "kernel"),
               ("my_linen_pixels", "bias")},
     {("my_linen_features", "kernel"), ("my_linen_features", "bias"),
      ("my_linen_score", "kernel"), ("my_linen_score", "bias")}),
    ("plain", {("my_plain_in", "w"), ("my_plain_in", "b"), ("my_plain_out", "w"),
               ("my_plain_out", "b")},
     {("my_plain_features", "w"), ("my_plain_features", "b"), ("my_plain_score", "w"),
      ("my_plain_score", "b")}),
])
def test_linen_and_plain_pairs_train_and_sample(tmp_path, kind, g_names, d_names):
    workdir = str(tmp_path / kind)
    config = _config(**{"model.generator": f"own_nets:{kind}_generator",
                        "model.critic": f"own_nets:{kind}_critic", "num_iterations": 2})
    summary = train_and_evaluate(config, workdir)
    assert summary["step"] == 2 and math.isfinite(summary["metrics"]["critic_loss"])
    tree = _checkpoint_tree(workdir, 2)
    assert set(_params(tree, "g_params")) == g_names
    assert set(_params(tree, "d_params")) == d_names
    first_layer = "my_linen_hidden" if kind == "linen" else "my_plain_in"
    weight = "kernel" if kind == "linen" else "w"
    assert tree[("g_params", first_layer, weight)] == (8, 32)

    out = str(tmp_path / "samples.npy")
    _ok(_cli(["wgan_jax.sample", f"--workdir={workdir}", "--num=3", "--seed=1", f"--out={out}"]))
    samples = np.load(out)
    # The CLI's samples are those of the user's generator restored in-process.
    _, gan, state, step = runs.load_run(workdir)
    assert step == 2
    np.testing.assert_array_equal(samples, runs.generate_samples(gan, state, 3, seed=1))


def test_factory_path_that_does_not_import_exits_2_and_writes_nothing(tmp_path):
    workdir = str(tmp_path / "w")
    result = _cli(["wgan_jax.main",
                   *_flags(workdir, "no_such_package.nets:make", "own_nets:nnx_critic")])
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert "config.model.generator" in errors[0] and "no_such_package" in errors[0]
    assert not os.path.exists(workdir)


@pytest.mark.parametrize("key, path, words", [
    ("generator", "own_nets:no_such_factory", ["has no attribute", "no_such_factory"]),
    ("critic", "own_nets:NOT_CALLABLE", ["not a callable"]),
    ("critic", "own_nets:raises", ["raised ValueError", "z_dim=8"]),
    ("generator", "own_nets:not_a_network", ["(config): cannot use builtins.dict", "NNX"]),
    ("generator", "own_nets", ["package.module:function"]),
])
def test_bad_factory_is_one_config_error_before_any_write(tmp_path, key, path, words):
    workdir = tmp_path / "w"
    config = _config(**{f"model.{key}": path})
    with pytest.raises(ConfigError) as error:
        train_and_evaluate(config, str(workdir))
    message = str(error.value)
    assert message.startswith(f"config.model.{key}: ") and "\n" not in message, message
    for word in words:
        assert word in message, message
    assert not workdir.exists()


def test_factory_and_object_for_the_same_network_is_refused(tmp_path):
    import own_nets

    config = _config(**{"model.generator": "own_nets:linen_generator"})
    with pytest.raises(ConfigError, match="config.model.generator: .*give one"):
        train_and_evaluate(config, str(tmp_path / "w"),
                           generator=own_nets.linen_generator(config))
    assert not (tmp_path / "w").exists()
