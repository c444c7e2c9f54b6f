"""benchmarks/gpu_table.py: the GPU plan's script stays runnable on CPU with tiny sizes.

The table, the first-iteration comparison and the checkpoint crosscheck run here with both
"platforms" on the CPU (so every difference must be exactly 0); on a GPU the same commands
measure (docs/accelerators.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "gpu_table.py")
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gpu_table  # noqa: E402

TINY = ["--override", "model.width=8", "--override", "global_batch_size=8"]


def test_parse_override_reads_python_literals():
    assert gpu_table.parse_override("model.width=8") == ("model.width", 8)
    assert gpu_table.parse_override("penalty_weight=0.5") == ("penalty_weight", 0.5)
    assert gpu_table.parse_override("model.kind=dcgan") == ("model.kind", "dcgan")
    assert gpu_table.parse_override("augment='a,b'") == ("augment", "a,b")


def test_compare_metrics_is_relative_to_max_one_and_the_value():
    a = {"x": 1000.0, "y": 0.5, "only_a": 1.0}
    r = gpu_table.compare_metrics(a, {"x": 1000.005, "y": 0.500001}, tol=1e-5)
    assert r["metrics"] == 2 and r["worst"] == "x" and r["within"]
    assert r["max_diff"] == pytest.approx(5e-6, rel=1e-6)  # 0.005 / 1000
    r = gpu_table.compare_metrics(a, {"x": 1000.0, "y": 0.50002}, tol=1e-5)
    assert r["worst"] == "y" and not r["within"]  # 2e-5 absolute below |value| 1
    assert not gpu_table.compare_metrics(a, {"z": 1.0}, tol=1.0)["within"]  # nothing compared


def _records() -> dict:
    seconds = {"ours_f32": [0.010, 0.010, 0.011], "ours_bf16": [0.005, 0.005, 0.006],
               "torch_eager": [0.020, 0.030, 0.022], "torch_compile": [0.012, 0.012, 0.010]}
    return {"peaks": {"float32": 400e12, "bfloat16": 800e12}, "models": {"resnet32": {
        "batch": 64, "n_critic": 5, "seconds": seconds, "flops_per_iteration": 2e12,
        "compile_seconds": {"ours_f32": 30.0, "ours_bf16": 31.0, "torch_eager": 0.0,
                            "torch_compile": 60.0}}}}


def test_table_ratios_and_shares_of_peak():
    text = gpu_table.table(_records())
    head, _, row = text.splitlines()
    assert "PyTorch eager / ours f32" in head and "torch.compile / ours bf16" in head
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:6] == ["resnet32", "64", "10.00", "5.00", "22.00", "12.00"]
    # eager / ours f32 = 22 / 10 with the per-round ratios; compile / ours bf16 = 12 / 5.
    assert cells[6] == "**2.20** (2.00, 3.00, 2.00)"
    assert cells[9] == "**2.40** (2.40, 2.40, 1.67)"
    assert cells[10] == "2000.00"
    # 2 TFLOP in 10 ms = 200 TFLOP/s = 50% of the float32 peak; bf16: 400 = 50% of 800.
    assert cells[11] == "200 (50%)" and cells[12] == "400 (50%)"
    assert cells[-1] == "ours f32 30.0, ours bf16 31.0, torch.compile 60.0"
    goals = gpu_table.goals(_records())
    assert goals[1] == ("resnet32 ours bf16: eager / ours 4.40 (goal >= 1.5), torch.compile / "
                        "ours 2.40 (goal >= 1.0), 5.0 ms (goal < 20 ms)")


@pytest.mark.slow
def test_table_runs_on_cpu_with_tiny_sizes(tmp_path):
    out = subprocess.run(
        [sys.executable, SCRIPT, "table", "--models", "toy", *TINY, "--override",
         "n_critic=1", "--iters", "1", "--warmup", "1", "--rounds", "2", "--peak_sizes", "64",
         "--json", str(tmp_path / "t.json")],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("cpu (cpu), jax ")
    assert lines[1].startswith("note: ") and "PyTorch columns skipped" in lines[1]
    assert lines[2].startswith("| model | batch | ours f32 ms/iteration | ours bf16 ms/iteration |")
    assert [line.split("|")[1].strip() for line in lines[4:]] == ["toy"]
    records = json.loads((tmp_path / "t.json").read_text())
    for r in records["models"].values():
        assert r["batch"] == 8 and r["flops_per_iteration"] > 0
        assert set(r["seconds"]) == {"ours_f32", "ours_bf16"}
        assert all(len(v) == 2 and min(v) > 0 for v in r["seconds"].values())


@pytest.mark.slow
def test_crosscheck_on_one_cpu_finds_every_difference_zero(tmp_path):
    out = subprocess.run(
        [sys.executable, SCRIPT, "crosscheck", "--out", str(tmp_path), "--configs", "bench_toy",
         "--ckpt_config", "toy_8gaussians", *TINY],
        capture_output=True, text=True, timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "crosscheck.json").read_text())
    assert [(r["check"], r["config"]) for r in rows] == [
        ("first iteration, accel at highest vs cpu", "bench_toy"),
        ("first iteration, accel at default vs cpu", "bench_toy"),
        ("cpu checkpoint resumed on accel vs on cpu", "toy_8gaussians"),
        ("accel checkpoint resumed on accel vs on cpu", "toy_8gaussians"),
    ]
    for r in rows:
        assert r["within"] and r["max_diff"] == 0.0 and r["metrics"] >= 10, r
    first = json.loads((tmp_path / "first_accel_bench_toy_default.json").read_text())
    assert {"grad_norm/critic", "grad_norm/generator"} <= set(first["iterations"][0])
    resumed = json.loads((tmp_path / "ckpt" / "resume_cpu_on_accel.json").read_text())
    assert (resumed["start_step"], resumed["last_step"]) == (2, 3)
    assert out.stdout.count("| yes |") == 4


@pytest.mark.slow
def test_gpu_plan_script_refuses_an_unknown_step(tmp_path):
    plan = os.path.join(REPO, "benchmarks", "gpu_plan.sh")
    out = subprocess.run(["bash", plan, "9"], capture_output=True, text=True, timeout=300,
                         cwd=REPO, env={**os.environ, "OUT": str(tmp_path)})
    assert out.returncode == 2, out.stderr
    assert "error: step must be 1, 2, 3, 4, short or impls, got 9" in out.stderr
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        check = subprocess.run([shellcheck, plan], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


@pytest.mark.slow
def test_quality_trains_both_dtypes_and_prints_their_metrics(tmp_path):
    out = subprocess.run(
        [sys.executable, SCRIPT, "quality", "--configs", "toy_25gaussians", "--seeds", "1",
         "--override", "num_iterations=3", "--override", "eval.num_samples=200", *TINY,
         "--root", str(tmp_path), "--json", str(tmp_path / "q.json")],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "q.json").read_text())
    assert [(r["dtype"], r["last_step"]) for r in rows] == [("float32", 3), ("bfloat16", 3)]
    lines = out.stdout.splitlines()
    assert lines[2].startswith("| toy_25gaussians | high_quality | modes |")
    assert [line.split("|")[1].strip() for line in lines[4:6]] == ["float32", "bfloat16"]
    config = json.loads((tmp_path / "toy_25gaussians_bfloat16_seed0" / "config.json").read_text())
    assert config["compute_dtype"] == "bfloat16"
