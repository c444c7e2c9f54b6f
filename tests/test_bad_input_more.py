"""Bad input, round 2 (issue 24, groups 4 and 5): every case ends in one `error:` line with exit
status 2 and nothing written, or in the documented line; and `sample`'s streamed output.

The fast tests call the library (validation, folder scanning, log set-aside, diagnose, sample
streaming); the `slow` ones run the commands in a subprocess, one per case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from conftest import REPO, cpu_env, run_module
from PIL import Image
from test_bad_input import _assert_clean_failure

from wgan_jax import fs, records, runs, sampling
from wgan_jax.config import (
    apply_overrides,
    data_shape,
    get_config_schema,
)
from wgan_jax.data import folder
from wgan_jax.errors import DataError, UserError
from wgan_jax.state import create_train_state


def test_a_workdir_that_is_a_file_or_under_one_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        fs.check_directory(str(afile))
    with pytest.raises(UserError, match=f"{afile} exists and is not a directory"):
        fs.check_directory(str(afile / "run"))
    fs.check_directory(str(tmp_path / "new" / "run"))  # missing: created later
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def _image_folder(root, n: int = 4):
    root.mkdir()
    for i in range(n):
        Image.new("L", (8, 8), 40 * i).save(root / f"{i}.png")
    os.symlink(root / "0.png", root / "link_ok.png")  # a symlink to a regular file is fine
    return root


class _Alarm:
    """Fails the test instead of hanging when the code under test blocks (a FIFO read)."""

    def __enter__(self):
        def fail(signum, frame):
            raise TimeoutError("blocked for 30 s")

        self.previous = signal.signal(signal.SIGALRM, fail)
        signal.alarm(30)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


def test_folder_entries_that_are_not_regular_files_are_named_or_skipped(tmp_path):
    root = _image_folder(tmp_path / "imgs")
    os.symlink(root / "missing.png", root / "x.png")
    os.mkfifo(root / "pipe.png")
    data = tmp_path / "data"
    with _Alarm(), pytest.raises(DataError) as error:
        folder.folder_source(str(root), str(data), 8, 1)
    line = str(error.value)
    assert "\n" not in line and "pipe.png (a FIFO)" in line
    assert "x.png (a dangling symlink)" in line and "skip_corrupt_images" in line
    assert not data.exists()  # nothing converted, no temporary folder left
    with _Alarm():
        source = folder.folder_source(str(root), str(data), 8, 1, skip_corrupt=True)
    assert len(source) == 5  # 4 images and the good symlink
    assert [p for p in os.listdir(data / "folders") if ".tmp-" in p] == []


def test_set_aside_logs_moves_an_earlier_runs_logs(tmp_path):
    workdir = str(tmp_path)
    assert records.set_aside_logs(workdir) is None
    files = {"metrics.jsonl": '{"step": 5}\n', "events.jsonl": '{"step": 5, "rule": "x"}\n',
             "events.out.tfevents.1.host": "tb", "config.json": "{}"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    moved = records.set_aside_logs(workdir, when=0.0)
    assert moved == os.path.join(workdir, "logs-before-19700101T000000Z")
    assert sorted(os.listdir(moved)) == sorted(n for n in files if n != "config.json")
    for name in os.listdir(moved):
        assert (tmp_path / os.path.basename(moved) / name).read_text() == files[name]
    assert sorted(os.listdir(tmp_path)) == ["config.json", os.path.basename(moved)]
    (tmp_path / "metrics.jsonl").write_text("")
    assert records.set_aside_logs(workdir, when=0.0).endswith("Z-2")  # never overwritten


def test_diagnose_names_an_event_whose_evidence_is_not_an_object(tmp_path):
    from wgan_jax.diagnose import diagnose

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "critic_loss": 1.0}\n')
    (tmp_path / "events.jsonl").write_text(
        '{"step": 1, "rule": "rollback", "message": "m", "evidence": [1, 2]}\n')
    with pytest.raises(UserError, match=r"events.jsonl: event 1 .*'rollback'.* not a JSON "
                                        r"object: \[1, 2\]"):
        diagnose(str(tmp_path))


# --- sample: streamed to disk in blocks -------------------------------------------------------


def _toy_run() -> runs.Run:
    c = get_config_schema()
    apply_overrides(c, {"model.width": 8})
    gan = runs.build_gan(c)
    state = jax.device_get(create_train_state(gan, data_shape(c), 0, False))
    return runs.Run(c, gan, state, 0)


def _recording_generator(monkeypatch) -> list[int]:
    """Records the number of latents of every generator call `iter_samples` makes."""
    sizes: list[int] = []
    real = sampling.generate_from_latents

    def recording(gan, state, z, use_ema, labels=None):
        sizes.append(len(z))
        return real(gan, state, z, use_ema, labels)

    monkeypatch.setattr(sampling, "generate_from_latents", recording)
    return sizes


@pytest.mark.slow
def test_write_samples_streams_blocks_and_equals_one_shot_generation(tmp_path, monkeypatch):
    run = _toy_run()
    sizes = _recording_generator(monkeypatch)
    path = str(tmp_path / "s.npy")
    seen = []
    shape = runs.write_samples(run, path, 30, seed=3, block=7,
                               progress=lambda done, total: seen.append((done, total)))
    assert shape == (30, 2) and sizes == [7] * 5  # 5 blocks, the last padded: one compile
    assert seen == [(7, 30), (14, 30), (21, 30), (28, 30), (30, 30)]
    samples = np.load(path)
    assert samples.shape == (30, 2) and samples.dtype == np.float32
    # The same as generating from all the blocks' latents at once.
    z = np.concatenate([np.asarray(runs.block_latents(3, k, min(7, 30 - 7 * k), 2))
                        for k in range(5)])
    one_shot = sampling.generate_from_latents(run.gan, run.state, z, False)
    np.testing.assert_allclose(samples, one_shot, rtol=1e-6, atol=1e-6)
    # The first N of a larger draw; and N <= a block is the one-shot draw of earlier versions.
    runs.write_samples(run, str(tmp_path / "t.npy"), 12, seed=3, block=7)
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), samples[:12])
    runs.write_samples(run, str(tmp_path / "u.npy"), 5, seed=3)
    np.testing.assert_allclose(np.load(tmp_path / "u.npy"),
                               sampling.draw_samples(run.gan, run.state, 5, 3, False),
                               rtol=1e-6, atol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["s.npy", "t.npy", "u.npy"]  # no temporary left


def test_write_samples_png_and_refusals_write_nothing(tmp_path):
    run = _toy_run()
    png = str(tmp_path / "s.png")
    assert runs.write_samples(run, png, 50, seed=0) == (50, 2)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"  # a picture, not .npy bytes
    os.remove(png)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    bad = [
        (str(tmp_path / "s.txt"), "not '.txt'"),
        (str(tmp_path / "s"), "without a suffix"),
        (str(tmp_path / "adir"), "is a directory"),
        (str(tmp_path / "afile" / "s.npy"), "is not a directory"),
    ]
    for path, words in bad:
        with pytest.raises(UserError, match=words):
            runs.write_samples(run, path, 5, seed=0)
    with pytest.raises(UserError, match="at most 100000 samples"):
        runs.write_samples(run, png, 100_001, seed=0)
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile"] and not os.listdir(tmp_path / "adir")


def test_write_samples_that_fail_midway_leave_no_file(tmp_path, monkeypatch):
    run = _toy_run()
    real = sampling.generate_from_latents
    calls = []

    def failing(gan, state, z, use_ema, labels=None):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(gan, state, z, use_ema, labels)

    monkeypatch.setattr(sampling, "generate_from_latents", failing)
    with pytest.raises(UserError, match="No space left on device"):
        runs.write_samples(run, str(tmp_path / "s.npy"), 30, seed=0, block=7)
    assert os.listdir(tmp_path) == []


# --- the commands, one subprocess per case ----------------------------------------------------

TOY = ["--config=configs/toy_25gaussians.py", "--config.num_iterations=2", "--config.log_every=1",
       "--config.model.width=8", "--config.global_batch_size=8", "--config.sample_every=0",
       "--config.plot_every=0"]
CONFIG_FILES = {
    "bad_syntax.py": "def get_config(:\n",
    "raises.py": "def get_config():\n    raise RuntimeError('boom')\n",
    "plain_dict.py": "def get_config():\n    return {'seed': 1}\n",
}
# (arguments with {tmp}, words of the error line)
MAIN_CASES = [
    (["--workdir={tmp}/afile", *TOY], ["workdir", "afile", "not a directory"]),
    (["--workdir={tmp}/afile/run", *TOY], ["afile", "not a directory"]),
    (["--workdir={tmp}/w", "--config={tmp}/bad_syntax.py"], ["bad_syntax.py", "SyntaxError"]),
    (["--workdir={tmp}/w", "--config={tmp}/raises.py"], ["raises.py", "RuntimeError: boom"]),
    (["--workdir={tmp}/w", "--config={tmp}/plain_dict.py"], ["plain_dict.py", "got a dict"]),
    (["--workdir={tmp}/w", *TOY, "--config.seed=-1"], ["config.seed", ">= 0"]),
    (["--workdir={tmp}/w", *TOY, "--config.eval_every=1", "--config.eval.num_samples=0"],
     ["config.eval.num_samples", ">= 10"]),
    (["--workdir={tmp}/w", *TOY, "--config.penalty_target=nan"], ["config.penalty_target"]),
    (["--workdir={tmp}/w", *TOY, "--config.rollback_lr_factor=nan"],
     ["config.rollback_lr_factor"]),
    (["--workdir={tmp}/w", *TOY, "--config.max_rollbacks=-1"], ["config.max_rollbacks"]),
    (["--workdir={tmp}/w", *TOY, "--config.loss_explosion_factor=-inf"],
     ["config.loss_explosion_factor"]),
    (["--workdir={tmp}/w", "--config.dataset=folder:{tmp}/dangling",
      "--config.image_size=8", "--config.data_dir={tmp}/data"],
     ["x.png (a dangling symlink)", "skip_corrupt_images"]),
    (["--workdir={tmp}/w", "--config.dataset=folder:{tmp}/fifo", "--config.image_size=8",
      "--config.data_dir={tmp}/data"], ["pipe.png (a FIFO)", "skip_corrupt_images"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, words", MAIN_CASES,
                         ids=["workdir_is_file", "parent_is_file", "syntax_error", "raises",
                              "plain_dict", "seed", "eval_num_samples", "penalty_target",
                              "rollback_lr_factor", "max_rollbacks", "loss_explosion_factor",
                              "dangling_symlink", "fifo"])
def test_main_bad_input_round_2(args, words, tmp_path):
    (tmp_path / "afile").write_text("x")
    for name, text in CONFIG_FILES.items():
        (tmp_path / name).write_text(text)
    os.symlink(tmp_path / "missing.png", _image_folder(tmp_path / "dangling") / "x.png")
    os.mkfifo(_image_folder(tmp_path / "fifo") / "pipe.png")
    before = sorted(os.listdir(tmp_path))
    result = run_module(["wgan_jax.main", *[a.format(tmp=tmp_path) for a in args]], timeout=300)
    _assert_clean_failure(result, str(tmp_path / "w"), [w.format(tmp=tmp_path) for w in words])
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "afile").read_text() == "x"


# (arguments with {tmp}; the --out checks come before the run is loaded)
SAMPLE_CASES = [
    (["--out={tmp}/adir"], ["adir", "is a directory"]),
    (["--out={tmp}/afile/s.npy"], ["afile", "is not a directory"]),
    (["--out={tmp}/s.txt"], ["s.txt", ".npy", ".png", "'.txt'"]),
    (["--out=/sys/wgan_jax_sample.npy"], ["/sys", "cannot write"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, words", SAMPLE_CASES,
                         ids=["directory", "under_a_file", "suffix", "not_writable"])
def test_sample_bad_out(args, words, tmp_path):
    if "/sys/" in args[0] and os.access("/sys", os.W_OK) and os.path.isdir("/sys/class"):
        probe = "/sys/wgan_jax_probe"
        try:
            open(probe, "w").close()
            os.remove(probe)
            pytest.skip("/sys is writable here")
        except OSError:
            pass
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    result = run_module(["wgan_jax.sample", f"--workdir={tmp_path}/missing",
                         *[a.format(tmp=tmp_path) for a in args]], timeout=300)
    _assert_clean_failure(result, str(tmp_path / "missing"), words)
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile"] and not os.listdir(tmp_path / "adir")


@pytest.mark.slow
def test_diagnose_bad_evidence_is_one_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "critic_loss": 1.0}\n')
    (tmp_path / "events.jsonl").write_text('{"step": 1, "rule": "x", "evidence": "oops"}\n')
    result = run_module(["wgan_jax.diagnose", f"--workdir={tmp_path}"], timeout=300)
    _assert_clean_failure(result, str(tmp_path / "nothing"), ["events.jsonl", "not a JSON object"])


def _files(workdir) -> dict[str, bytes]:
    out = {}
    for directory, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, workdir)] = f.read()
    return out


@pytest.mark.slow
def test_rerun_without_checkpoint_starts_new_logs_and_a_finished_resume_says_so(tmp_path):
    """A killed run's logs (rows, an event, TensorBoard; no checkpoint) are set aside by the
    rerun from step 0; then a resume whose checkpoint reached num_iterations says so, exit 0,
    and changes nothing."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    old = {"metrics.jsonl": '{"step": 1, "critic_loss": 9.0}\n{"step": 2, "critic_loss": 8.0}\n',
           "events.jsonl": '{"step": 2, "rule": "loss_spike", "evidence": {}}\n',
           "events.out.tfevents.123.host": "old tensorboard"}
    for name, text in old.items():
        (workdir / name).write_text(text)
    result = run_module(["wgan_jax.main", f"--workdir={workdir}", *TOY], timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "earlier logs (metrics, events, TensorBoard) were moved to" in result.stderr
    aside = [n for n in os.listdir(workdir) if n.startswith("logs-before-")]
    assert len(aside) == 1
    for name, text in old.items():
        assert (workdir / aside[0] / name).read_text() == text
    rows = records.read_jsonl(str(workdir / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["critic_loss"] != 9.0
    assert not (workdir / "events.out.tfevents.123.host").exists()

    before = _files(workdir)
    result = run_module(["wgan_jax.main", f"--workdir={workdir}", *TOY,
                         "--config.num_iterations=1"], timeout=600)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "nothing to train: checkpoint 2" in result.stderr
    assert "already reached num_iterations=1" in result.stderr
    after = _files(workdir)
    after.pop(".lock", None), before.pop(".lock", None)
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_during_setup_says_nothing_was_trained(sig, tmp_path):
    """The signal arrives right after the topology line, while the trainer restores, builds
    and compiles: exit 0, one line, no checkpoint, no traceback."""
    workdir = tmp_path / "w"
    env = cpu_env(1)
    process = subprocess.Popen(
        [sys.executable, "-m", "wgan_jax.main", f"--workdir={workdir}",
         "--config=configs/digits.py", "--config.num_iterations=5"],
        stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines = []
    deadline = time.monotonic() + 300
    for line in process.stderr:
        lines.append(line)
        if "topology:" in line or time.monotonic() > deadline:
            break
    process.send_signal(sig)
    _, rest = process.communicate(timeout=120)
    stderr = "".join(lines) + rest
    assert process.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "Fatal" not in stderr, stderr[-2000:]
    assert f"stopped by {sig.name} during setup" in stderr
    assert "nothing was trained yet" in stderr
    checkpoints = workdir / "checkpoints"
    steps = [n for n in os.listdir(checkpoints) if n.isdigit()] if checkpoints.exists() else []
    assert steps == [] and not (workdir / "metrics.jsonl").exists()


@pytest.mark.slow
def test_sample_cli_streams_npy_and_writes_png(tmp_path):
    """`sample` on a tiny trained image run: a .npy of several blocks equals the library's
    samples; a .png is a picture; more samples than a picture holds is one line."""
    workdir = str(tmp_path / "run")
    result = run_module([
        "wgan_jax.main", f"--workdir={workdir}", "--config.dataset=digits",
        "--config.image_size=8", "--config.model.width=8", "--config.model.z_dim=16",
        "--config.global_batch_size=16", "--config.n_critic=1", "--config.num_iterations=1",
        "--config.sample_every=0", "--config.plot_every=0",
    ], timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    npy, png = str(tmp_path / "s.npy"), str(tmp_path / "s.png")
    result = run_module(["wgan_jax.sample", f"--workdir={workdir}", "--num=2500", "--seed=4",
                         f"--out={npy}"], timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    run = runs.load_run(workdir)
    np.testing.assert_allclose(np.load(npy), runs.generate_samples(run.gan, run.state, 2500, 4),
                               rtol=1e-5, atol=1e-6)
    result = run_module(["wgan_jax.sample", f"--workdir={workdir}", "--num=16", f"--out={png}"],
                        timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    with Image.open(png) as image:
        assert image.format == "PNG"
    os.remove(png)
    result = run_module(["wgan_jax.sample", f"--workdir={workdir}", "--num=5000",
                         f"--out={png}"], timeout=600)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # One line: orbax's notes that the checkpoints were opened read-only stay off the terminal.
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --out") and "at most 4096" in line
    assert not os.path.exists(png)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["dataset"] == "digits"
