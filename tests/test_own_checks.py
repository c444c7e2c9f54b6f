"""Networks checked at the door: every wrong network is one line naming it, what was expected
and what was found, for NNX modules, Linen modules, (init, apply) pairs and factories named in
a config (through the command line: exit 2, nothing written)."""

from __future__ import annotations

import os

import pytest
from conftest import REPO, run_module
from own_nets import (
    CaseLinenCritic,
    CaseLinenGenerator,
    CaseNNXCritic,
    CaseNNXGenerator,
    LinenWithoutTrain,
    case_pair_critic,
    case_pair_generator,
)

from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.errors import ConfigError
from wgan_jax.models.checks import check_networks

TESTS = os.path.dirname(os.path.abspath(__file__))

# case -> {kind: (generator, critic) builder}, and the words the one line must hold
GOOD = {"nnx": (CaseNNXGenerator, lambda: CaseNNXCritic(norm=False)),
        "linen": (CaseLinenGenerator, CaseLinenCritic),
        "pair": (case_pair_generator, case_pair_critic)}
CASES = {
    "critic with BatchNorm": ("critic", ["batch statistics", "BatchNorm"], {
        "nnx": (None, lambda: CaseNNXCritic(norm=None)),
        "linen": (None, lambda: CaseLinenCritic(norm=True))}),
    "critic with cross-device BatchNorm": ("critic", ["per-example", "BatchNorm"], {
        "nnx": (None, lambda: CaseNNXCritic(norm="data"))}),
    "critic minus its batch mean": ("critic", ["per-example"], {
        "pair": (None, lambda: case_pair_critic(center=True))}),
    "batch-mean critic": ("critic", ["scores [B]", "got a scalar []"], {
        "nnx": (None, lambda: CaseNNXCritic(norm=False, mean=True)),
        "linen": (None, lambda: CaseLinenCritic(mean=True)),
        "pair": (None, lambda: case_pair_critic(mean=True))}),
    "[B, 2] critic": ("critic", ["scores [B]", "got [B, 2]"], {
        "nnx": (None, lambda: CaseNNXCritic(norm=False, outputs=2)),
        "linen": (None, lambda: CaseLinenCritic(outputs=2)),
        "pair": (None, lambda: case_pair_critic(outputs=2))}),
    "generator with the wrong image size": ("generator", ["[B, 8, 8, 1]", "[B, 16, 16, 1]"], {
        "nnx": (lambda: CaseNNXGenerator(shape=(16, 16, 1)), None),
        "linen": (lambda: CaseLinenGenerator(shape=(16, 16, 1)), None),
        "pair": (lambda: case_pair_generator(shape=(16, 16, 1)), None)}),
    "wrong z_dim": ("generator", ["latents [B, 8]", "(16,)"], {
        "nnx": (lambda: CaseNNXGenerator(z_dim=16), None),
        "pair": (lambda: case_pair_generator(z_dim=16), None)}),
    "flat output": ("generator", ["[B, 8, 8, 1]", "got [B, 64]", "reshape"], {
        "nnx": (lambda: CaseNNXGenerator(shape=(64,)), None),
        "linen": (lambda: CaseLinenGenerator(shape=(64,)), None),
        "pair": (lambda: case_pair_generator(shape=(64,)), None)}),
    "BatchNorm without axis_name": ("generator", ["global batch", "axis_name='data'"], {
        "nnx": (lambda: CaseNNXGenerator(axis_name=None), None),
        "linen": (lambda: CaseLinenGenerator(axis_name=None), None),
        "pair": (lambda: case_pair_generator(local_statistics=True), None)}),
    "Linen without train": ("generator", ["`train` argument"], {
        "linen": (LinenWithoutTrain, None)}),
    "a class instead of an instance": ("generator", ["class", "not a module", "(...)"], {
        "nnx": (lambda: CaseNNXGenerator, None),
        "linen": (lambda: CaseLinenGenerator, None)}),
}
TABLE = [(case, kind) for case, (_, _, kinds) in CASES.items() for kind in kinds]


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and len(text) < 400, text
    return text


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_good_networks_pass(kind):
    g, c = GOOD[kind]
    check_networks(g(), c(), (8, 8, 1), 8)


@pytest.mark.parametrize("case, kind", TABLE)
def test_a_wrong_network_is_one_line_naming_it(case, kind):
    which, words, kinds = CASES[case]
    make_g, make_c = kinds[kind]
    generator = make_g() if make_g else GOOD[kind][0]()
    critic = make_c() if make_c else GOOD[kind][1]()
    with pytest.raises(ValueError) as error:
        check_networks(generator, critic, (8, 8, 1), 8, names=("my_gen", "my_critic"))
    assert isinstance(error.value, ConfigError)  # the command line's one line, exit 2
    text = _one_line(error.value)
    assert text.startswith(f"my_{'gen' if which == 'generator' else which}: "), text
    for word in words:
        assert word in text, (word, text)


def _config(**overrides):
    c = get_config_schema()
    apply_overrides(c, {"dataset": "digits", "image_size": 8, "num_channels": 1,
                        "global_batch_size": 16, "num_iterations": 2, "model.z_dim": 8,
                        **overrides})
    return c


@pytest.mark.slow
def test_the_trainer_checks_objects_before_writing_anything(tmp_path):
    from wgan_jax.train import train_and_evaluate

    workdir = tmp_path / "run"
    with pytest.raises(ValueError, match=r"^critic: expected scores \[B\]") as error:
        train_and_evaluate(_config(), str(workdir), generator=CaseNNXGenerator(),
                           critic=CaseNNXCritic(norm=False, outputs=2))
    _one_line(error.value)
    assert not workdir.exists()


INDIVISIBLE = r"""
import numpy as np, optax
from own_nets import CaseNNXGenerator, CaseNNXCritic
from wgan_jax.state import GAN, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_batches, place_state
mesh = make_mesh()
gan = GAN(CaseNNXGenerator(), CaseNNXCritic(norm=False), optax.sgd(0.1), optax.sgd(0.1), 8)
state = place_state(create_train_state(gan, (8, 8, 1), 0, False), mesh)
step = make_train_step(StepConfig(n_critic=1), mesh, gan)
for call in (lambda: place_batches(np.zeros((1, 12, 8, 8, 1), np.float32), mesh),
             lambda: step(state, np.zeros((1, 12, 8, 8, 1), np.float32))):
    try:
        call()
    except ValueError as error:
        print(str(error))
"""


@pytest.mark.slow
def test_an_indivisible_batch_on_8_devices_is_one_line():
    from conftest import run_python

    result = run_python(INDIVISIBLE, devices=8, cwd=TESTS)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines == ["the batch of 12 examples does not split over the 8 devices of the mesh's "
                     "'data' axis: use a multiple of 8"] * 2, lines


@pytest.mark.slow
@pytest.mark.parametrize("key, factory, words", [
    ("critic", "own_nets:bad_critic_batchnorm", "batch statistics"),
    ("generator", "own_nets:bad_generator_image_size", "got [B, 16, 16, 1]"),
    ("generator", "own_nets:bad_generator_class", "not a module"),
])
def test_a_wrong_factory_network_through_the_cli_is_one_line_exit_2(tmp_path, key, factory,
                                                                    words):
    workdir = str(tmp_path / "run")
    other = "own_nets:nnx_critic" if key == "generator" else "own_nets:nnx_generator"
    nets = {key: factory, ("critic" if key == "generator" else "generator"): other}
    args = ["wgan_jax.main", f"--config={REPO}/configs/digits.py", f"--workdir={workdir}",
            "--config.image_size=8", "--config.num_channels=1", "--config.model.z_dim=8",
            "--config.model.width=16", "--config.num_iterations=2",
            f"--config.model.generator={nets['generator']}",
            f"--config.model.critic={nets['critic']}"]
    result = run_module(args, devices=1, cwd=TESTS)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: config.model.{key}: "), lines[-3:]
    assert words in lines[-1] and "Traceback" not in result.stderr
    assert not os.path.exists(workdir)


def test_a_batchnorm_critic_is_refused_only_under_an_input_gradient_penalty():
    from wgan_jax.models.checks import check_run_networks

    config = _config(penalty="gp")
    critic = CaseNNXCritic(norm="data")  # global-batch statistics
    with pytest.raises(ValueError, match="^critic: expected per-example scores"):
        check_run_networks(config, CaseNNXGenerator(), critic, given=(True, True))
    config.penalty = "clip"  # the original WGAN's critic had BatchNorm
    check_run_networks(config, CaseNNXGenerator(), critic, given=(True, True))
    with pytest.raises(ValueError, match="axis_name='data'"):  # but global statistics
        check_run_networks(config, CaseNNXGenerator(), CaseNNXCritic(norm=None),
                           given=(True, True))
