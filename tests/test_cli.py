"""Bad input to the CLI: one line naming the key, exit status 2, nothing written."""

from __future__ import annotations

import os

import pytest
from conftest import run_module

pytestmark = pytest.mark.slow  # subprocesses or whole runs

TOY = "configs/toy_25gaussians.py"


def _assert_clean_failure(result, workdir, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert not os.path.exists(workdir), os.listdir(workdir)


@pytest.mark.parametrize(
    "override, words",
    [
        ("--config.no_such_key=1", ["no_such_key"]),
        ("--config.n_critic=abc", ["n_critic"]),
        ("--config.n_critic=0", ["n_critic", ">= 1"]),
        ("--config.critic_lr=-0.0001", ["critic_lr", ">= 0"]),
        ("--config.loss=wgan", ["loss", "wasserstein"]),
        ("--config.dataset=toy:moons", ["dataset", "moons"]),
    ],
)
def test_bad_override(override, words, tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", f"--config={TOY}", f"--workdir={workdir}", override])
    _assert_clean_failure(result, workdir, *words)


def test_batch_not_divisible_by_devices(tmp_path):
    workdir = str(tmp_path / "w")
    result = run_module(
        ["wgan_jax.main", f"--config={TOY}", f"--workdir={workdir}",
         "--config.global_batch_size=12"],
        devices=8,
    )
    _assert_clean_failure(result, workdir, "global_batch_size", "8 devices")


def test_config_file_with_unknown_key_and_missing_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from wgan_jax.config import get_config_schema\n"
        "def get_config():\n    c = get_config_schema()\n    c.n_critics = 3\n    return c\n"
    )
    workdir = str(tmp_path / "w")
    result = run_module(["wgan_jax.main", f"--config={bad}", f"--workdir={workdir}"])
    _assert_clean_failure(result, workdir, "n_critics")
    result = run_module(["wgan_jax.main", f"--config={tmp_path}/nope.py", f"--workdir={workdir}"])
    _assert_clean_failure(result, workdir, "nope.py")


def test_existing_workdir_is_left_untouched_on_bad_input(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "metrics.jsonl").write_text('{"step": 1}\n')
    result = run_module(["wgan_jax.main", f"--config={TOY}", f"--workdir={workdir}",
                         "--config.n_critic=0"])
    assert result.returncode == 2
    assert sorted(os.listdir(workdir)) == ["metrics.jsonl"]
    assert (workdir / "metrics.jsonl").read_text() == '{"step": 1}\n'


def _only_cpu_here(monkeypatch, tmp_path, *, installed: tuple[str, ...],
                   vendors: tuple[str, ...], env: dict[str, str] | None = None) -> bool:
    import importlib.util

    from wgan_jax import cli

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.delenv("JAX_FORCE_TPU_INIT", raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name in installed else
                        (None if name in ("libtpu", *cli._GPU_PLUGINS) else find_spec(name, *a)))
    files = []
    for i, vendor in enumerate(vendors):
        path = os.path.join(tmp_path, f"vendor{i}")
        with open(path, "w") as f:
            f.write(vendor + "\n")
        files.append(path)
    monkeypatch.setattr(cli.glob, "glob", lambda pattern: files)
    return cli.only_cpu_here()


def test_libtpu_without_a_tpu_leaves_jax_only_the_cpu(monkeypatch, tmp_path):
    nvme, gpu, google = "0x144d", "0x10de", "0x1ae0"
    assert _only_cpu_here(monkeypatch, tmp_path, installed=("libtpu",), vendors=(nvme, gpu))
    assert not _only_cpu_here(monkeypatch, tmp_path, installed=(), vendors=(nvme,))
    assert not _only_cpu_here(monkeypatch, tmp_path, installed=("libtpu",), vendors=(nvme, google))
    assert not _only_cpu_here(monkeypatch, tmp_path, installed=("libtpu", "jax_cuda12_plugin"),
                              vendors=(gpu,))
    assert not _only_cpu_here(monkeypatch, tmp_path, installed=("libtpu",), vendors=(),
                              env={"JAX_PLATFORMS": "tpu"})
    assert not _only_cpu_here(monkeypatch, tmp_path, installed=("libtpu",), vendors=(),
                              env={"JAX_FORCE_TPU_INIT": "1"})
