"""Tests for wgan_jax.records: JSONL logs, resume truncation, TensorBoard events, the plots of
a run's metrics (`update_plots`). The image grid itself: tests/test_plots.py."""

import glob
import json
import math
import os
import struct

import numpy as np
import pytest
from PIL import Image
from tensorboardX.proto import event_pb2

from wgan_jax import plots, records


def _tb_events(workdir):
    """Parses every TFRecord in the workdir's event files into Event protos."""
    events = []
    for path in sorted(glob.glob(os.path.join(workdir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        offset = 0
        while offset + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            start = offset + 12
            event = event_pb2.Event()
            event.ParseFromString(data[start : start + length])
            events.append(event)
            offset = start + length + 4
    return events


def _tb_scalars(workdir):
    out = {}
    for event in _tb_events(workdir):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def test_jsonl_lines_and_nonfinite_as_null(tmp_path):
    w = records.MetricWriter(str(tmp_path), tensorboard=False)
    w.write_scalars(1, {"critic_loss": np.float32(0.5), "generator_loss": 2})
    w.write_scalars(2, {"critic_loss": float("nan"), "generator_loss": float("inf")})
    w.write_event({"step": 2, "rule": "nonfinite", "evidence": {"x": float("nan")}})
    w.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "critic_loss": 0.5, "generator_loss": 2},
        {"step": 2, "critic_loss": None, "generator_loss": None},
    ]
    assert json.loads((tmp_path / "events.jsonl").read_text()) == {
        "step": 2, "rule": "nonfinite", "evidence": {"x": None}
    }


def test_disabled_writer_writes_nothing(tmp_path):
    w = records.MetricWriter(str(tmp_path / "run"), enabled=False)
    w.write_scalars(1, {"a": 1.0})
    w.write_event({"step": 1})
    w.write_images(1, "x", np.zeros((1, 4, 4, 1)))
    w.close()
    assert not (tmp_path / "run").exists()


def test_read_jsonl_tolerates_truncated_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "a": 1}\n{"step": 2, "a": 2}\n{"step": 3, "a"')
    assert records.read_jsonl(str(path)) == [{"step": 1, "a": 1}, {"step": 2, "a": 2}]
    with pytest.raises(FileNotFoundError):
        records.read_jsonl(str(tmp_path / "missing.jsonl"))


def test_resume_truncates_logs_after_resume_step(tmp_path):
    w = records.MetricWriter(str(tmp_path), tensorboard=False)
    for step in (10, 20, 30, 40):
        w.write_scalars(step, {"a": float(step)})
        w.write_event({"step": step, "rule": "r"})
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 50, "a"')  # killed mid-write
    w = records.MetricWriter(str(tmp_path), tensorboard=False, resume_step=20)
    w.write_scalars(30, {"a": -1.0})
    w.close()
    rows = records.read_jsonl(str(tmp_path / "metrics.jsonl"))
    assert [(r["step"], r["a"]) for r in rows] == [(10, 10.0), (20, 20.0), (30, -1.0)]
    assert [e["step"] for e in records.read_jsonl(str(tmp_path / "events.jsonl"))] == [10, 20]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_tensorboard_scalars_histograms_images(tmp_path):
    w = records.MetricWriter(str(tmp_path))
    w.write_scalars(5, {"critic_loss": 1.5, "grad_norm/critic": 0.25})
    w.write_histograms(5, {"weights": np.random.default_rng(0).normal(size=100)})
    w.write_images(5, "samples", np.zeros((4, 8, 8, 4)))
    w.close()
    scalars = _tb_scalars(str(tmp_path))
    assert scalars["critic_loss"] == [(5, 1.5)]
    assert scalars["grad_norm/critic"] == [(5, 0.25)]
    tags = {v.tag for e in _tb_events(str(tmp_path)) for v in e.summary.value}
    assert {"weights", "samples"} <= tags
    image = next(
        v.image for e in _tb_events(str(tmp_path)) for v in e.summary.value if v.tag == "samples"
    )
    assert image.colorspace == 3 and image.height == 2 * 10 + 2


def test_save_scatter_and_update_plots(tmp_path):
    rng = np.random.default_rng(0)
    plots.save_scatter(str(tmp_path / "s.png"), rng.normal(size=(50, 2)),
                         rng.normal(size=(80, 2)), title="step 1")
    with Image.open(tmp_path / "s.png") as image:
        assert image.size[0] > 100
    w = records.MetricWriter(str(tmp_path), tensorboard=False)
    for step in range(0, 200, 10):
        w.write_scalars(step, {
            "critic_loss": -1.0 / (step + 1), "generator_loss": 0.5, "wasserstein_estimate": 1.0,
            "gradient_penalty": 0.01, "grad_norm/critic": 1.0, "grad_norm/generator": 0.1,
            "grad_norm/critic/Dense_0": 0.5, "input_grad_norm/interp_mean": 1.0,
            "dead_units/generator": 0.0, "diversity": 1.0,
        })
        if step % 50 == 0:
            w.write_scalars(step, {"eval/fid": 10.0 - step / 100, "eval/modes": math.nan})
    w.close()
    paths = records.update_plots(str(tmp_path))
    names = sorted(os.path.basename(p) for p in paths)
    assert names == sorted([
        "losses.png", "wasserstein.png", "gradient_penalty.png", "input_grad_norms.png",
        "grad_norms.png", "layer_grad_norms.png", "units.png", "eval.png",
    ])
    for p in paths:
        with Image.open(p) as image:
            image.verify()
    assert records.update_plots(str(tmp_path / "empty")) == []
