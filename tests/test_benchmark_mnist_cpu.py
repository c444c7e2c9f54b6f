"""benchmarks/mnist_cpu.py runs end to end on CPU with tiny nets: each candidate trains with its
own overrides on the real MNIST digits written as `tfds:mnist` (or the upscaled `digits`),
reaches every CPU-time checkpoint in order, and is scored against the real held-out digits
(whose confidence the table states)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from common import apply_overrides, config_value, load_config, read_rows  # noqa: E402
from mnist_cpu import CANDIDATES, RECIPE, DigitsScore, candidate_config, table  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "mnist_cpu.py"),
                           *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_mnist_cpu_checkpoints_overrides_and_scores(tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    proc = _run("--candidates", "wgangp_ref,rpgan_r1r2_ema", "--image_size", "8",
                "--plot", str(tmp_path / "curves.png"),
                "--override", "model.width=8", "--override", "global_batch_size=16",
                "--cpu_minutes", "0.1,0.2", "--probe", "3", "--num_samples", "200",
                "--root", str(tmp_path), "--rows", str(rows_file))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(str(rows_file))
    assert [(r["candidate"], r["target_cpu_minutes"]) for r in rows] == [
        ("wgangp_ref", 0.1), ("wgangp_ref", 0.2), ("rpgan_r1r2_ema", 0.1),
        ("rpgan_r1r2_ema", 0.2)]
    for first, second in (rows[:2], rows[2:]):
        assert 0 < first["step"] < second["step"]
        for r in (first, second):
            assert r["cpu_seconds"] >= 0.97 * 60 * r["target_cpu_minutes"]
            assert r["fid"] > 0 and 0 < r["confidence"] <= 1
            assert np.isclose(r["fid_ratio"], r["fid"] / r["floor_fid"])
            assert np.isclose(r["confidence_ratio"], r["confidence"] / r["real_confidence"])
        with open(os.path.join(second["workdir"], "config.json")) as f:
            written = json.load(f)
        assert written["dataset"] == "tfds:mnist" and written["image_size"] == 8
        assert written["data_dir"] == str(tmp_path / "tfds")
        assert config_value(written, "model.width") == 8  # the command line's, last
        assert written["num_iterations"] == second["step"]
        for key, value in second["overrides"].items():
            if key != "model.width":
                assert config_value(written, key) == value, key
    assert rows[2]["overrides"]["loss"] == "rpgan"
    # The real references are the same for every candidate, and real digits are confident.
    assert len({r["real_confidence"] for r in rows}) == 1 and rows[0]["real_confidence"] > 0.8
    assert {r["data"] for r in rows} == {"mnist5k"}
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[0].startswith("| Candidate | Seed | Iterations | Train CPU (min)")
    assert len(table) == 2 + len(rows) + 1 and table[-1].startswith("| real held-out digits")
    from PIL import Image

    assert Image.open(tmp_path / "curves.png").size == (1000, 400)


@pytest.mark.slow
def test_digits_scores_the_upscaled_digits_held_out_split():
    args = argparse.Namespace(data="digits", image_size=8, override=[])
    config = candidate_config(RECIPE, 0, args)
    assert config.dataset == "digits"
    score = DigitsScore(config)
    assert score.default_samples == 1500 and score.real_confidence > 0.8
    noise = np.random.default_rng(0).uniform(-1, 1, (500, 8, 8, 1))
    assert score.fid(noise) > 10 * score.floor_fid > 0
    assert score.confidence(noise) < score.real_confidence


@pytest.mark.slow
def test_unknown_candidate_is_one_line_exit_2(tmp_path):
    proc = _run("--candidates", "nope", "--root", str(tmp_path))
    assert proc.returncode == 2
    assert "unknown nope" in proc.stderr.strip().splitlines()[-1]


def test_the_shipped_recipe_is_the_benchmarked_candidate():
    """configs/mnist_cpu.py = configs/mnist.py with the recipe candidate's overrides (only its
    length differs), so the benchmark's numbers are the config's."""
    recipe, reference = load_config("mnist_cpu"), load_config("mnist")
    apply_overrides(reference, CANDIDATES[RECIPE][1])
    reference.num_iterations = recipe.num_iterations
    assert recipe.to_dict() == reference.to_dict()
    assert recipe.to_dict() != load_config("mnist").to_dict()


def test_table_summarises_seeds_per_candidate_and_checkpoint():
    def row(seed, minutes, conf, fid):
        return {"candidate": RECIPE, "seed": seed, "step": 10, "target_cpu_minutes": minutes,
                "cpu_seconds": 60.0 * minutes, "confidence_ratio": conf, "fid": fid,
                "fid_ratio": fid / 2.0, "real_confidence": 0.96, "floor_fid": 2.0}

    one_seed = table([row(0, 4, 0.9, 4.0), row(0, 8, 0.94, 3.0)])
    assert "| Seeds |" not in one_seed and len(one_seed.splitlines()) == 5
    lines = table([row(0, 4, 0.9, 4.0), row(1, 4, 0.8, 2.0), row(0, 8, 0.94, 3.0)]).splitlines()
    assert lines[-2] == f"| {RECIPE} | 2 | 4.0 | 0.850 +- 0.050 | 1.50 +- 0.50 |"
    assert lines[-1] == f"| {RECIPE} | 1 | 8.0 | 0.940 +- 0.000 | 1.50 +- 0.00 |"
