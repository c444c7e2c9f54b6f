"""Tests for wgan_jax.fs and the workdir I/O built on it, on local paths and on `memory://` URLs.

fsspec's in-memory filesystem stands in for gs://: both are URLs that go through the same
fsspec code path (only the filesystem implementation differs), so these tests cover the remote
branches without a network. Orbax and whole training runs are not run on memory://.
"""

import importlib.util
import io
import json
import logging
import os
import uuid

import fsspec
import numpy as np
import pytest
from PIL import Image

from wgan_jax import checkpoint_best, diagnose, fs, plots, records, workdir_lock
from wgan_jax.errors import UserError


@pytest.fixture
def remote():
    """A fresh `memory://` workdir URL, deleted afterwards (the memory store is process-wide)."""
    root = f"memory://wgan-jax-test-{uuid.uuid4().hex}"
    yield f"{root}/run"
    memory = fsspec.filesystem("memory")
    if memory.exists(root):
        memory.rm(root, recursive=True)


# ---- local paths ---------------------------------------------------------------------------


def test_is_remote_join_abspath():
    assert fs.is_remote("gs://b/r") and fs.is_remote("memory://x") and fs.is_remote("s3://b")
    assert not fs.is_remote("/tmp/run") and not fs.is_remote("run") and not fs.is_remote("a:b")
    assert fs.join("gs://b/r", "checkpoints", "best.json") == "gs://b/r/checkpoints/best.json"
    assert fs.join("gs://b/r/", "checkpoints") == "gs://b/r/checkpoints"
    assert fs.abspath(fs.join("gs://b/r", "checkpoints")) == "gs://b/r/checkpoints"
    assert fs.join("run", "x") == os.path.join("run", "x")
    assert fs.abspath("run") == os.path.abspath("run")


def test_local_write_atomic_leaves_no_temp_files(tmp_path):
    path = str(tmp_path / "sub" / "config.json")
    fs.write_atomic(path, '{"a": 1}\n')  # creates the missing directory
    fs.write_atomic(path, '{"a": 2}\n')  # replaces
    fs.write_atomic(str(tmp_path / "x.bin"), b"\x00\xff")
    assert fs.read_text(path) == '{"a": 2}\n'
    assert fs.read_bytes(str(tmp_path / "x.bin")) == b"\x00\xff"
    assert sorted(os.listdir(tmp_path / "sub")) == ["config.json"]
    assert sorted(fs.listdir(str(tmp_path))) == ["sub", "x.bin"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # as open(path, "w") would make it


def test_local_write_atomic_failure_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = str(tmp_path / "best.json")
    fs.write_atomic(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        fs.write_atomic(path, "new")
    assert os.listdir(tmp_path) == ["best.json"]
    assert fs.read_text(path) == "old"


def test_local_rename_exists_isdir_remove_tree(tmp_path):
    step = tmp_path / "checkpoints" / "5"
    fs.makedirs(str(step / "state"))
    fs.write_atomic(str(step / "state" / "data"), b"x")
    target = str(step) + ".corrupt-1"
    fs.rename(str(step), target)
    assert not fs.exists(str(step)) and fs.isdir(target)
    assert fs.read_bytes(os.path.join(target, "state", "data")) == b"x"
    fs.remove_tree(target)
    fs.remove_tree(target)  # already gone: ignored
    assert fs.listdir(str(tmp_path / "checkpoints")) == []
    with pytest.raises(FileNotFoundError):
        fs.read_text(str(tmp_path / "missing"))


def test_local_appender_is_a_real_append(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    fs.write_atomic(path, "a\n")
    log = fs.Appender(path)
    log.write("b\n")
    log.flush()
    assert fs.read_text(path) == "a\nb\n"
    log.write("c\n")
    log.close()
    log.close()
    assert fs.read_text(path) == "a\nb\nc\n"


# ---- memory:// URLs (the gs:// code path) ------------------------------------------------


def test_remote_write_read_list_rename(remote):
    fs.makedirs(remote)  # a no-op for object stores
    path = fs.join(remote, "checkpoints", "3", "data.json")
    fs.write_atomic(path, '{"position": 3}')
    fs.write_atomic(fs.join(remote, "config.json"), b"{}")
    assert json.loads(fs.read_text(path)) == {"position": 3}
    assert fs.read_bytes(fs.join(remote, "config.json")) == b"{}"
    assert fs.exists(path) and fs.isdir(remote) and fs.isdir(fs.join(remote, "checkpoints"))
    assert sorted(fs.listdir(remote)) == ["checkpoints", "config.json"]
    moved = fs.join(remote, "checkpoints", "3.corrupt-7")
    fs.rename(fs.join(remote, "checkpoints", "3"), moved)
    assert fs.listdir(fs.join(remote, "checkpoints")) == ["3.corrupt-7"]
    assert fs.read_text(fs.join(moved, "data.json")) == '{"position": 3}'
    fs.remove_tree(moved)
    fs.remove_tree(moved)
    assert not fs.exists(moved)
    with pytest.raises(FileNotFoundError):
        fs.read_bytes(fs.join(remote, "missing.json"))


def test_remote_metric_writer_appends_in_order_and_resumes(remote, caplog):
    with caplog.at_level(logging.INFO, logger="wgan_jax"):
        w = records.MetricWriter(remote, tensorboard=True)
    assert [r.message for r in caplog.records if "TensorBoard is off" in r.message]
    for step in range(1, 6):
        w.write_scalars(step, {"critic_loss": float(step), "nan": float("nan")})
        # Each write is flushed: the object holds every line so far.
        assert len(records.read_jsonl(w.metrics_path)) == step
    w.write_event({"step": 2, "rule": "loss_spike"})
    w.write_event({"step": 4, "rule": "resume"})
    w.write_histograms(5, {"x": np.ones(3)})  # no TensorBoard: no-ops
    w.write_images(5, "samples", np.zeros((1, 4, 4, 1)))
    w.close()
    rows = records.read_jsonl(fs.join(remote, records.METRICS_FILE))
    assert [(r["step"], r["critic_loss"], r["nan"]) for r in rows] == [
        (s, float(s), None) for s in range(1, 6)
    ]
    assert [e["step"] for e in records.read_jsonl(fs.join(remote, records.EVENTS_FILE))] == [2, 4]
    assert not [n for n in fs.listdir(remote) if n.startswith("events.out")]

    # Resume from step 3: later lines go, then appending continues after the kept ones.
    w = records.MetricWriter(remote, tensorboard=False, resume_step=3)
    w.write_scalars(4, {"critic_loss": 40.0})
    w.write_event({"step": 4, "rule": "resume"})
    w.close()
    rows = records.read_jsonl(fs.join(remote, records.METRICS_FILE))
    assert [(r["step"], r["critic_loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0),
                                                            (4, 40.0)]
    assert [e["step"] for e in records.read_jsonl(w.events_path)] == [2, 4]


def test_remote_images_and_plots(remote):
    path = fs.join(remote, "samples", "step_0000001.png")
    plots.save_image_grid(path, np.zeros((4, 8, 8, 3), np.float32))
    image = Image.open(io.BytesIO(fs.read_bytes(path)))
    assert image.format == "PNG" and image.mode == "RGB"
    w = records.MetricWriter(remote, tensorboard=False)
    for step in (1, 2, 3):
        w.write_scalars(step, {"critic_loss": -step, "generator_loss": step})
    w.close()
    written = records.update_plots(remote)
    assert written == [fs.join(remote, "plots", "losses.png")]
    assert fs.read_bytes(written[0]).startswith(b"\x89PNG")


def test_best_json_helpers(tmp_path, remote):
    record = {"step": 7, "metric": "eval/w1", "value": 0.25}
    for directory in (str(tmp_path / "checkpoints"), fs.join(remote, "checkpoints")):
        path = fs.join(directory, "best.json")
        assert checkpoint_best.read_best_file(path) is None
        fs.makedirs(directory)
        checkpoint_best.write_best_file(path, record)
        assert checkpoint_best.read_best_file(path) == record
        fs.write_atomic(path, "{not json")
        assert checkpoint_best.read_best_file(path) is None
    assert os.listdir(tmp_path / "checkpoints") == ["best.json"]


def test_remote_workdir_lock_is_skipped_with_one_info_line(remote, caplog):
    lock = workdir_lock.WorkdirLock(remote)
    with caplog.at_level(logging.INFO, logger="wgan_jax"):
        lock.acquire()
    assert len([r for r in caplog.records if "not locked" in r.message]) == 1
    assert not fs.exists(fs.join(remote, ".lock"))
    lock.release()


def test_diagnose_reads_a_remote_workdir(remote):
    fs.write_atomic(fs.join(remote, "config.json"), json.dumps({"loss": "wasserstein"}))
    w = records.MetricWriter(remote, tensorboard=False)
    for step in range(1, 4):
        w.write_scalars(step, {"critic_loss": -1.0, "generator_loss": 1.0,
                               "wasserstein_estimate": 1.0, "gradient_penalty": 0.01})
    w.close()
    fs.write_atomic(fs.join(remote, "checkpoints", "3", "data"), b"x")
    report = diagnose.diagnose(remote)
    assert report["workdir"] == remote
    assert report["rows"] == 3 and report["checkpoints"] == [3]


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
def test_gs_without_gcsfs_is_a_user_error_with_the_install_hint():
    with pytest.raises(UserError, match=r"wgan_jax\[gcs\]"):
        fs.exists("gs://some-bucket/run/config.json")
