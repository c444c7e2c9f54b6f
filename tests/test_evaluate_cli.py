"""`python -m wgan_jax.evaluate` on a tiny trained toy run, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from conftest import run_module

pytestmark = pytest.mark.slow  # subprocesses or whole runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    workdir = str(tmp_path_factory.mktemp("eval") / "run")
    result = run_module([
        "wgan_jax.main", "--config=configs/ring8.py", f"--workdir={workdir}",
        "--config.num_iterations=20", "--config.model.width=32", "--config.log_every=10",
        "--config.sample_every=0", "--config.eval_every=0", "--config.ema_decay=0.9",
    ])
    assert result.returncode == 0, result.stderr[-2000:]
    return workdir


def test_evaluate_json(trained):
    result = run_module(["wgan_jax.evaluate", f"--workdir={trained}", "--num=200", "--json"])
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["step"] == 20 and report["num_samples"] == 200 and report["ema"] is True
    assert report["dataset"] == "toy:ring8"
    metrics = report["metrics"]
    assert set(metrics) == {"eval/modes", "eval/high_quality", "eval/reverse_kl", "eval/w1"}
    assert 0 <= metrics["eval/modes"] <= 8 and metrics["eval/w1"] > 0


def test_evaluate_table_for_a_step(trained):
    result = run_module(["wgan_jax.evaluate", f"--workdir={trained}", "--num=100",
                         "--checkpoint=20"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "checkpoint 20" in result.stdout
    assert "eval/w1" in result.stdout and "lower is better" in result.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--workdir=/no/such/workdir"], ["/no/such/workdir", "does not exist"]),
        ([], ["--workdir"]),
        (["--checkpoint=newest"], ["--checkpoint", "newest"]),
        (["--checkpoint=999"], ["no checkpoint 999"]),
        (["--checkpoint=best"], ["no best checkpoint"]),
    ],
)
def test_bad_input_exits_2_with_one_line(trained, args, words):
    if args and not args[0].startswith("--workdir"):
        args = [f"--workdir={trained}", *args]
    result = run_module(["wgan_jax.evaluate", *args])
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]


def test_empty_workdir_has_no_checkpoint(tmp_path):
    result = run_module(["wgan_jax.evaluate", f"--workdir={tmp_path}"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
