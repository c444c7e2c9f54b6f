"""Tests for `python -m wgan_jax.diagnose`: exit codes 0/1/2, text and JSON reports."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from wgan_jax import diagnose


def _rows(n=120, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        e = rng.normal(size=6)
        w = 0.5 + 1.5 * math.exp(-i / 30) + 0.05 * e[0]
        rows.append({
            "step": 100 * i, "critic_loss": -w, "generator_loss": 0.3 + 0.1 * e[1],
            "wasserstein_estimate": w, "gradient_penalty": 0.01,
            "grad_norm/critic": float(np.exp(0.3 * e[2])),
            "grad_norm/generator": 0.2 * float(np.exp(0.3 * e[3])),
            "input_grad_norm/interp_mean": 1.0 + 0.1 * e[4], "diversity": 1.0 + 0.05 * e[5],
        })
        if i % 10 == 9:
            rows.append({"step": 100 * i, "eval/fid": 40.0 / (1 + i / 20)})
    return rows


def _workdir(tmp_path, rows, config=None, events=(), checkpoints=()):
    workdir = tmp_path / "run"
    workdir.mkdir()
    if config is not None:
        (workdir / "config.json").write_text(json.dumps(config))
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (workdir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    for step in checkpoints:
        (workdir / "checkpoints" / str(step)).mkdir(parents=True)
    return str(workdir)


def _dcgan_rows():
    """The issue's story: D loss -> 0.01 while G loss jumps from 6 to 45; FID got worse."""
    rows = []
    for i in range(80):
        d, g = 0.3 + 0.02 * math.cos(i), 6.0 + 0.3 * math.sin(i)
        if i >= 40:
            d, g = 0.01, 6.0 + 39.0 * min(1.0, (i - 40) / 10)
        rows.append({"step": 100 * i, "critic_loss": d, "generator_loss": g,
                     "d_real": 0.99 if i >= 40 else 0.7, "d_fake": 0.005 if i >= 40 else 0.3})
        if i % 10 == 9:
            rows.append({"step": 100 * i, "eval/fid": 30.0 - i / 10 if i < 40 else 90.0})
    return rows


def test_healthy_run_exits_0(tmp_path, capsys):
    workdir = _workdir(tmp_path, _rows(), {"loss": "wasserstein", "penalty": "gp"})
    assert diagnose.run(workdir, as_json=False) == 0
    out = capsys.readouterr().out
    assert "HEALTHY" in out and "eval/fid" in out


def test_dcgan_overpowering_exits_1_with_advice(tmp_path, capsys):
    config = {"loss": "logistic", "penalty": "none", "critic_lr": 2e-4, "generator_lr": 2e-4,
              "model": {"critic_norm": "batch"}, "health": {"patience": 2}}
    workdir = _workdir(tmp_path, _dcgan_rows(), config, checkpoints=(1000, 3000, 3900, 7900))
    assert diagnose.run(workdir, as_json=False) == 1
    out = capsys.readouterr().out
    assert "PROBLEMS FOUND" in out
    assert "Discriminator overpowering the generator: started at step 4" in out
    assert "still present at the last step 7900" in out
    assert "loss='wasserstein'" in out and "model.critic_norm='layer'" in out
    assert "Lower critic_lr from 0.0002 to 0.0001" in out
    assert "Roll back to checkpoint 3900" in out and "eval/fid" in out


def test_json_output_merges_recorded_events(tmp_path, capsys):
    rows = _rows()
    events = [
        {"step": 500, "rule": "rollback", "message": "rolled back to step 400",
         "advice": "lower the learning rate", "evidence": {"nonfinite_steps": 5}},
        {"step": 600, "rule": "resume", "severity": "info", "message": "resumed at step 600"},
    ]
    workdir = _workdir(tmp_path, rows, None, events)
    assert diagnose.run(workdir, as_json=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] is False and report["loss"] == "wasserstein"
    assert [p["rule"] for p in report["problems"]] == ["rollback"]
    assert report["problems"][0]["evidence"] == {"nonfinite_steps": 5}
    assert report["best_eval"]["metric"] == "eval/fid"
    assert any("resumed" in n for n in report["notes"])
    assert any("no config.json" in n for n in report["notes"])


def test_json_nan_metrics_are_reported_as_valid_json(tmp_path, capsys):
    rows = _rows()
    rows[60]["critic_loss"] = None
    workdir = _workdir(tmp_path, rows, {"loss": "wasserstein", "penalty": "gp"})
    assert diagnose.run(workdir, as_json=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems"][0]["rule"] == "nonfinite"
    assert report["problems"][0]["ongoing"] is False


@pytest.mark.parametrize("case", ["missing", "no_metrics", "empty", "bad_config"])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case):
    workdir = tmp_path / "run"
    if case != "missing":
        workdir.mkdir()
    if case == "empty":
        (workdir / "metrics.jsonl").write_text("")
    if case == "bad_config":
        (workdir / "metrics.jsonl").write_text('{"step": 1, "critic_loss": 1}\n')
        (workdir / "config.json").write_text("{not json")
    assert diagnose.run(str(workdir), as_json=True) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1


@pytest.mark.slow
def test_command_line(tmp_path):
    workdir = _workdir(tmp_path, _rows(), {"loss": "wasserstein", "penalty": "gp"})
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(__file__), os.pardir, "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    ok = subprocess.run([sys.executable, "-m", "wgan_jax.diagnose", "--workdir", workdir,
                         "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert ok.returncode == 0 and json.loads(ok.stdout)["healthy"] is True
    bad = subprocess.run([sys.executable, "-m", "wgan_jax.diagnose", "--workdir",
                          str(tmp_path / "nope")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert "Traceback" not in bad.stderr


def test_rows_are_replayed_in_written_order_after_a_rollback(tmp_path, capsys):
    rows = [r for r in _rows() if "critic_loss" in r]
    abandoned = [dict(r, critic_loss=math.nan) for r in rows[80:83]]
    retried = rows[80:]
    workdir = _workdir(tmp_path, rows[:83] + abandoned + retried, {"loss": "wasserstein"},
                       events=[{"step": 8200, "rule": "rollback", "message": "rolled back"}])
    assert diagnose.run(workdir, as_json=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["rule"] for p in report["problems"]] == ["nonfinite", "rollback"]
    assert report["last_step"] == rows[-1]["step"]
    assert report["last_values"]["critic_loss"] == rows[-1]["critic_loss"]


def test_recorded_health_events_are_judged_again_from_metrics(tmp_path, capsys):
    stale = {"step": 500, "rule": "penalty_off_target", "message": "old thresholds"}
    workdir = _workdir(tmp_path, _rows(), {"loss": "wasserstein", "penalty": "gp"}, [stale])
    assert diagnose.run(workdir, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


EXAMPLE = os.path.join("examples", "collapse_run")


def test_readme_transcript_is_the_tools_output_on_the_shipped_example(capsys):
    # examples/collapse_run holds the logs (config.json, metrics.jsonl, events.jsonl) of
    # `python -m wgan_jax.main --config=configs/dcgan_collapse.py`; docs/diagnostics.md shows
    # diagnose's report of it. After a change to the report, paste the output of
    # `python -m wgan_jax.diagnose --workdir examples/collapse_run` into docs/diagnostics.md.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "docs", "diagnostics.md")) as f:
        readme = f.read()
    command = f"$ python -m wgan_jax.diagnose --workdir {EXAMPLE}\n"
    assert command in readme
    shown = readme.split(command, 1)[1].split("\n```", 1)[0]
    shown_report, status_line = shown.rsplit("\n$ echo $?\n", 1)
    status = diagnose.run(os.path.join(repo, EXAMPLE), as_json=False)
    printed = capsys.readouterr().out.replace(repo + os.sep, "")
    assert printed.rstrip("\n") == shown_report
    assert status == int(status_line) == 1
