"""Every bad input of the README's list, with a config file and with the embedded default.

`python -m wgan_jax.main --workdir DIR` (no `--config`) is the first command a new user types:
its overrides must fail exactly as a config file's do. And the flag errors of `sample`,
`evaluate` and `diagnose`. Each case: exit status 2, no traceback, one `error:` line naming the
key or flag, nothing written.
"""

from __future__ import annotations

import os

import pytest
from conftest import assert_one_error_line, run_module

pytestmark = pytest.mark.slow  # subprocesses or whole runs

# (override, words the error line must contain); valid for the digits config and the default.
MAIN_CASES = [
    ("--config.no_such_key=1", ["config.no_such_key", "no such config key"]),
    ("--config.model.widht=3", ["config.model.widht", "model.width"]),
    ("--config.n_critic=abc", ["n_critic"]),
    ("--config.n_critic=0", ["n_critic", ">= 1"]),
    ("--config.num_iterations=0", ["num_iterations", ">= 1"]),
    ("--config.critic_lr=-0.0001", ["critic_lr", ">= 0"]),
    ("--config.model.width=-8", ["model.width"]),
    ("--config.loss=wgan", ["loss", "wasserstein"]),
    ("--config.dataset=folder:/no/such/folder", ["/no/such/folder"]),
]
SOURCES = {"file": ["--config=configs/digits.py"], "embedded": []}


def _assert_clean_failure(result, workdir: str, words: list[str]) -> None:
    assert_one_error_line(result, words)
    assert not os.path.exists(workdir), os.listdir(workdir)


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("override, words", MAIN_CASES, ids=[c[0] for c in MAIN_CASES])
def test_main_bad_config(source, override, words, tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", *SOURCES[source], f"--workdir={workdir}", override])
    _assert_clean_failure(result, workdir, words)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_main_batch_not_divisible_by_devices(source, tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(
        ["wgan_jax.main", *SOURCES[source], f"--workdir={workdir}",
         "--config.global_batch_size=12"],
        devices=8,
    )
    _assert_clean_failure(result, workdir, ["global_batch_size", "8 devices"])


def test_main_unknown_flag_and_missing_config_file(tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", f"--workdir={workdir}", "--bogus=1"])
    _assert_clean_failure(result, workdir, ["bogus"])
    result = run_module(["wgan_jax.main", f"--config={tmp_path}/nope.py", f"--workdir={workdir}"])
    _assert_clean_failure(result, workdir, ["nope.py"])


# Labels of conditional runs, read from the data before anything is written: (overrides with
# {flat} = a folder of images without class subfolders, {empty} = an empty tfds data_dir).
LABEL_CASES = [
    (["--config.dataset=folder:{flat}", "--config.folder_classes=True",
      "--config.model.conditional=projection"],
     ["config.folder_classes", "{flat}", "directly in it"]),
    (["--config.dataset=tfds:mnist", "--config.data_dir={empty}", "--config.data_label=digit",
      "--config.model.conditional=projection"],
     ["config.data_label", "tfds:mnist", "no feature 'digit'"]),
    (["--config.dataset=tfds:mnist", "--config.data_dir={empty}", "--config.data_label=image",
      "--config.model.conditional=projection"],
     ["config.data_label", "'image'", "not a ClassLabel"]),
]


@pytest.mark.parametrize("overrides, words", LABEL_CASES,
                         ids=["folder_classes_flat", "no_label_feature", "not_a_class_label"])
def test_main_bad_labels(overrides, words, tmp_path):
    from PIL import Image

    flat, empty = tmp_path / "flat", tmp_path / "empty"
    flat.mkdir()
    empty.mkdir()
    for i in range(2):
        Image.new("L", (8, 8), 40 * i).save(flat / f"{i}.png")
    names = {"flat": str(flat), "empty": str(empty)}
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", *SOURCES["file"], f"--workdir={workdir}",
                         f"--config.data_dir={tmp_path / 'data'}",
                         *[o.format(**names) for o in overrides]])
    _assert_clean_failure(result, workdir, [w.format(**names) for w in words])
    assert not (tmp_path / "data").exists()
    assert sorted(os.listdir(empty)) == [] and len(os.listdir(flat)) == 2


FLAG_CASES = [
    ("sample", ["--out={out}"], ["--workdir"]),
    ("sample", ["--workdir={missing}", "--out={out}"], ["does not exist"]),
    ("sample", ["--workdir={missing}", "--out={out}", "--num=-1"], ["--num"]),
    ("sample", ["--workdir={missing}", "--out={out}", "--num=abc"], ["num"]),
    ("sample", ["--workdir={missing}", "--out={out}", "--checkpoint=newest"], ["--checkpoint"]),
    ("evaluate", [], ["--workdir"]),
    ("evaluate", ["--workdir={missing}"], ["does not exist"]),
    ("evaluate", ["--workdir={missing}", "--num=abc"], ["num"]),
    ("diagnose", [], ["--workdir"]),
    ("diagnose", ["--workdir={missing}"], ["does not exist"]),
    ("diagnose", ["--workdir={missing}", "--bogus"], ["bogus"]),
]


@pytest.mark.parametrize(
    "command, args, words", FLAG_CASES, ids=[f"{c}{a}" for c, a, _ in FLAG_CASES]
)
def test_other_commands_bad_flags(command, args, words, tmp_path):
    missing = str(tmp_path / "missing")
    out = str(tmp_path / "out" / "s.npy")
    args = [a.format(missing=missing, out=out) for a in args]
    result = run_module([f"wgan_jax.{command}", *args])
    _assert_clean_failure(result, missing, words)
    assert not os.path.exists(os.path.dirname(out))
