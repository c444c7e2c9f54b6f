"""Faults a long run meets, and what survives each: disk full while saving, SIGKILL during an
asynchronous save or at random points, corrupt array bytes, SIGTERM to every process of a
2-process run, device counts changing between restarts; and the trainer's own refusals
(a non-finite final state, a changed batch).

Each fault is injected where it happens: in orbax's write path inside a subprocess
(`test_resume.SCRIPT`), by SIGKILL/SIGTERM from outside, or by flipping bytes on disk. The tiny toy
run and the persistent compilation cache come from `test_resume`.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO
from test_multihost import CONFIG, _free_port
from test_resume import (  # noqa: F401 - fixtures used by name
    SCRIPT,
    TINY,
    _env,
    assert_bitwise_equal,
    compilation_cache,
    events,
    final_state,
    make_config,
)

from wgan_jax import checkpoint as ckpt
from wgan_jax import checkpoint_content, runs, train
from wgan_jax.errors import DataError, UserError


def faulty(workdir: str, faults: dict, devices: int = 1, **overrides):
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, workdir, json.dumps({**TINY, **overrides}),
         json.dumps(faults)],
        capture_output=True, text=True, timeout=1200, env=_env(devices), cwd=REPO,
    )


def committed(workdir: str) -> list[int]:
    reader = ckpt.Checkpointer(workdir, read_only=True)
    try:
        return reader.all_steps()
    finally:
        reader.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, compilation_cache):  # noqa: F811 - the imported fixture
    """An uninterrupted TINY run (16 iterations, checkpoints 5, 10, 15, 16; keeps 2)."""
    workdir = str(tmp_path_factory.mktemp("reference") / "run")
    assert train.train_and_evaluate(make_config(), workdir, pictures=False)["step"] == 16
    state, data, step = final_state(workdir, make_config())
    assert step == 16
    return workdir, state, data


def assert_ends_like(reference, workdir: str) -> None:
    _, ref_state, ref_data = reference
    state, data, step = final_state(workdir, make_config())
    assert step == 16 and data == ref_data
    assert_bitwise_equal(ref_state, state)


@pytest.mark.slow
def test_disk_full_during_save_is_one_line_and_a_rerun_resumes(tmp_path, reference):
    workdir = str(tmp_path / "run")
    result = faulty(workdir, {"enospc_at": 10})
    assert result.returncode == 2, result.stderr[-3000:]
    # One line of ours (orbax's background threads log their own tracebacks as well).
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: checkpoint 10 could not be written"), line
    assert "No space left on device" in line and "newest committed: 5" in line
    assert committed(workdir) == [5]
    # The space is back: the rerun resumes from 5 and ends as if nothing had happened.
    summary = train.train_and_evaluate(make_config(), workdir, pictures=False)
    assert summary["start_step"] == 5 and summary["step"] == 16
    assert_ends_like(reference, workdir)


@pytest.mark.slow
def test_sigkill_during_async_save_resumes_from_the_previous_checkpoint(tmp_path, reference):
    workdir = str(tmp_path / "run")
    result = faulty(workdir, {"kill_in_save": 10})
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    checkpoints = os.path.join(workdir, "checkpoints")
    assert glob.glob(os.path.join(checkpoints, "10.orbax-checkpoint-tmp*")), "not mid-save"
    assert committed(workdir) == [5]
    summary = train.train_and_evaluate(make_config(), workdir, pictures=False)
    assert summary["start_step"] == 5 and summary["step"] == 16
    assert not glob.glob(os.path.join(checkpoints, "*tmp*"))  # cleaned up at start
    assert_ends_like(reference, workdir)


@pytest.mark.slow
def test_corrupt_array_data_falls_back_to_the_previous_checkpoint(tmp_path, reference):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference[0], workdir)
    assert committed(workdir) == [15, 16]
    # Flip bytes at a quarter, half and three quarters of every array-data file of checkpoint
    # 16 (small arrays are stored inside OCDBT's data nodes, the merged root keeps a copy, and
    # a file's layout varies between runs: one spot in one file can land on bytes no longer
    # referenced, which restore never reads).
    files = glob.glob(os.path.join(workdir, "checkpoints", "16", "state", "**", "d", "*"),
                      recursive=True)
    assert files
    for victim in files:
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            for at in (size // 4, size // 2, 3 * size // 4):
                f.seek(at)
                chunk = f.read(8)
                f.seek(at)
                f.write(bytes(b ^ 0x5A for b in chunk))

    summary = train.train_and_evaluate(make_config(), workdir, pictures=False)
    assert summary["start_step"] == 15 and summary["step"] == 16
    (event,) = [e for e in events(workdir) if e["rule"] == "checkpoint"]
    assert event["evidence"]["skipped_step"] == 16
    assert "resumed from 15" in event["message"]
    assert glob.glob(os.path.join(workdir, "checkpoints", "16.corrupt-*"))
    assert_ends_like(reference, workdir)  # iteration 16 recomputed from 15: the same bits


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_is_bitwise_identical(tmp_path, reference):
    positions = sorted(random.Random(17).sample(range(1, 16), 3))
    assert any(p % 2 for p in positions)  # not only right after a save
    workdir = str(tmp_path / "run")
    resumed_from = []
    for position in positions:  # checkpoints every 2 iterations, so that kills hit resumed runs
        result = faulty(workdir, {"kill_at": position}, checkpoint_every=2)
        assert result.returncode == -signal.SIGKILL, (position, result.stderr[-3000:])
        found = re.search(r"resuming from checkpoint (\d+)", result.stderr)
        resumed_from.append(int(found.group(1)) if found else 0)
    summary = train.train_and_evaluate(make_config(checkpoint_every=2), workdir, pictures=False)
    assert summary["step"] == 16 and 0 < summary["start_step"] <= positions[-1]
    # Killed runs were themselves resumed ones, each from a checkpoint before its kill.
    assert sum(map(bool, resumed_from)) >= 2, resumed_from
    assert all(r < p for r, p in zip(resumed_from, positions, strict=True)), resumed_from
    assert_ends_like(reference, workdir)


@pytest.mark.slow
def test_nonfinite_final_state_exits_nonzero_naming_the_last_good_checkpoint(
    tmp_path, monkeypatch
):
    make_step = train.make_train_step

    def poisoned_step(*args, **kwargs):
        step_fn = make_step(*args, **kwargs)

        def step(state, batch):
            state, metrics = step_fn(state, batch)
            if int(state.step) == 16:  # the critic's weights turn NaN in the last iteration
                state = state.replace(
                    d_params=jax.tree.map(lambda x: x * jnp.nan, state.d_params))
            return state, metrics

        return step

    monkeypatch.setattr(train, "make_train_step", poisoned_step)
    workdir = str(tmp_path / "run")
    with pytest.raises(UserError) as raised:
        train.train_and_evaluate(make_config(), workdir, pictures=False)
    message = str(raised.value)
    assert "\n" not in message and "step 16" in message and "non-finite" in message
    assert "last good checkpoint is 15" in message
    (event,) = [e for e in events(workdir) if e["rule"] == "nonfinite_final"]
    assert event["step"] == 16 and event["evidence"]["last_good_checkpoint"] == 15
    assert committed(workdir) == [10, 15]


DIGITS = {"dataset": "digits", "model.kind": "dcgan", "model.width": 8, "model.z_dim": 16,
          "image_size": 16, "num_channels": 1}


def test_changed_batch_continues_at_the_same_example():
    """4 iterations of 2 x 32 examples, then iterations of 2 x 64: the first one holds exactly
    the stream's examples 256..383, the ones the old batch would have read next."""
    from wgan_jax import input_pipeline
    from wgan_jax.data.spec import DataSpec
    from wgan_jax.step import make_mesh

    mesh = make_mesh()
    old = input_pipeline.create_input_pipeline(DataSpec.from_config(make_config(**DIGITS)), mesh)
    for _ in range(4):
        next(old)
    saved = old.get_state()
    following = np.concatenate([np.asarray(next(old)).reshape(-1) for _ in range(2)])
    new = input_pipeline.create_input_pipeline(
        DataSpec.from_config(make_config(**DIGITS, global_batch_size=64)), mesh)
    new.set_state(saved)
    assert new.position == 2
    served = np.asarray(next(new))  # [n_critic, 64, ...] = examples 256..383 in order
    np.testing.assert_array_equal(served.reshape(-1), following)
    # 256 examples are not a whole number of iterations of 2 x 48: refused, in one line.
    odd = input_pipeline.create_input_pipeline(
        DataSpec.from_config(make_config(**DIGITS, global_batch_size=48)), mesh)
    with pytest.raises(DataError, match="256 examples used are not a whole number .* 96"):
        odd.set_state(saved)
    for it in (old, new, odd):
        it.close()


@pytest.mark.slow
def test_changed_batch_of_a_toy_run_is_refused_before_anything_is_written(tmp_path):
    workdir = str(tmp_path / "run")
    small = {"num_iterations": 4, "checkpoint_every": 0}
    assert train.train_and_evaluate(make_config(**small), workdir, pictures=False)["step"] == 4
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        written = f.read()
    bigger = make_config(**{**small, "num_iterations": 5, "global_batch_size": 64})
    with pytest.raises(DataError) as raised:
        train.train_and_evaluate(bigger, workdir, pictures=False)
    message = str(raised.value)
    assert "\n" not in message and "global_batch_size=32" in message
    assert "toy batches depend on the batch size" in message
    assert committed(workdir) == [4]
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        assert f.read() == written


@pytest.mark.slow
def test_two_processes_sigterm_stop_at_one_step_then_restart_is_identical(tmp_path):
    flags = [f"--config={CONFIG}", "--config.num_iterations=100000", "--config.log_every=1",
             *[f"--config.{k}={v}" for k, v in TINY.items()
               if k not in ("num_iterations", "log_every")]]
    flags = [f for f in flags if not f.startswith("--config.checkpoint_every")]
    # A constant learning rate: the stopped run's num_iterations must not change its updates.
    flags += ["--config.checkpoint_every=0", "--config.lr_schedule=constant"]

    def launch(workdir, extra=()):
        port = _free_port()
        return [subprocess.Popen(
            [sys.executable, "-m", "wgan_jax.main", *flags, *extra, f"--workdir={workdir}",
             f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
             f"--process_id={i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(2), cwd=REPO)
            for i in range(2)]

    def finish(procs):
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=600)[1])
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise
        return outputs

    workdir = str(tmp_path / "run")
    procs = launch(workdir)
    metrics = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + 600
    while not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        assert all(p.poll() is None for p in procs) and time.monotonic() < deadline
        time.sleep(0.2)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    stderr = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for e in stderr]
    (stopped,) = committed(workdir)
    assert f"checkpoint {stopped} committed; stopped at step {stopped}" in stderr[0]
    for i, text in enumerate(stderr):  # orbax's log of each process's stop step
        steps = {int(line.rsplit("step=", 1)[1]) for line in text.splitlines()
                 if "Reached preemption sync point" in line}
        assert steps == {stopped}, (i, steps)

    # Restart to two more iterations, and an uninterrupted run of as many, both 2 processes.
    fresh = str(tmp_path / "uninterrupted")
    end = [f"--config.num_iterations={stopped + 2}"]
    stderr = finish(launch(workdir, end) + launch(fresh, end))
    assert f"resuming from checkpoint {stopped}" in stderr[0]
    config = runs.load_config_json(workdir)
    restarted, data, step = final_state(workdir, config)
    uninterrupted, fresh_data, fresh_step = final_state(fresh, config)
    assert step == fresh_step == stopped + 2 and data == fresh_data
    assert_bitwise_equal(uninterrupted, restarted)


@pytest.mark.slow
def test_elastic_restore_8_4_1_devices_first_iterations_equal(tmp_path):
    """8 -> 4 -> 1 devices through the CLI; the first iteration after each restore is compared
    with the same checkpoint restored on another device count (1, resp. 8).

    With one critic update per iteration, the critic's losses of an iteration are computed on
    the restored weights and the restored data position: equal up to float re-association
    (rtol 1e-5) only if both are exact. (The generator's loss follows a critic update, whose
    Adam step amplifies reduction-order noise to ~0.5% here: not compared.)"""
    flags = [f"--config={CONFIG}", "--config.log_every=1", "--config.n_critic=1",
             "--config.lr_schedule=constant",
             *[f"--config.{k}={v}" for k, v in TINY.items()
               if k not in ("num_iterations", "log_every", "n_critic")]]

    def cli(workdir, devices, end, start=None):
        result = subprocess.run(
            [sys.executable, "-m", "wgan_jax.main", *flags, f"--workdir={workdir}",
             f"--config.num_iterations={end}"],
            capture_output=True, text=True, timeout=1200, env=_env(devices), cwd=REPO)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"global_devices={devices}" in result.stderr
        if start is not None:
            assert f"resuming from checkpoint {start}" in result.stderr

    def row(workdir, step):
        with open(os.path.join(workdir, "metrics.jsonl")) as f:
            return [r for r in map(json.loads, f) if r["step"] == step][-1]

    workdir = str(tmp_path / "run")
    cli(workdir, 8, 2)
    shutil.copytree(workdir, str(tmp_path / "at2"))
    cli(workdir, 4, 4, start=2)
    shutil.copytree(workdir, str(tmp_path / "at4"))
    cli(workdir, 1, 6, start=4)
    config = runs.load_config_json(workdir)
    config.num_iterations = 3
    # checkpoint 2 on 1 device
    train.train_and_evaluate(config, str(tmp_path / "at2"), pictures=False)
    cli(str(tmp_path / "at4"), 8, 5, start=4)  # checkpoint 4 on 8 devices
    for step, other in ((3, "at2"), (5, "at4")):
        mine, theirs = row(workdir, step), row(str(tmp_path / other), step)
        for key in ("d_real", "d_fake", "gradient_penalty", "wasserstein_estimate"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-7), (step, key)


# ---- issue 24: the data item, a real full disk, an unwritable checkpoint directory -------


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["position_changed", "position_missing", "not_json"])
def test_edited_or_broken_data_item_falls_back_to_the_previous_checkpoint(
    tmp_path, reference, edit
):
    """The data item (data position, guard state) is covered by its own fingerprint: an
    edited position, an old-format item without `position` and bytes that are not JSON are
    corrupt checkpoints, like corrupt array data."""
    workdir = str(tmp_path / "run")
    shutil.copytree(reference[0], workdir)
    path = os.path.join(workdir, "checkpoints", "16", "data", "metadata")
    with open(path) as f:
        data = json.load(f)
    if edit == "position_changed":
        data["position"] += 1  # the fingerprint stays: the edit must be found by it
        text = json.dumps(data)
    elif edit == "position_missing":  # as saved before the data fingerprint existed
        text = json.dumps({k: v for k, v in data.items()
                           if k not in ("position", checkpoint_content.DATA_FINGERPRINT_KEY)})
    else:
        text = json.dumps(data)[:40]
    with open(path, "w") as f:
        f.write(text)

    summary = train.train_and_evaluate(make_config(), workdir, pictures=False)
    assert summary["start_step"] == 15 and summary["step"] == 16
    (event,) = [e for e in events(workdir) if e["rule"] == "checkpoint"]
    assert event["evidence"]["skipped_step"] == 16 and "resumed from 15" in event["message"]
    expected = {"position_changed": "data item does not match the fingerprint",
                "position_missing": "data item lacks position",
                "not_json": "JSONDecodeError"}[edit]
    assert expected in event["message"], event["message"]
    assert glob.glob(os.path.join(workdir, "checkpoints", "16.corrupt-*"))
    assert_ends_like(reference, workdir)


def _tree_bytes(path: str) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512
               for d, _, files in os.walk(path) for f in files) + 4096 * sum(
        len(dirs) for _, dirs, _ in os.walk(path))


@pytest.mark.slow
def test_real_full_disk_is_one_line_and_the_rerun_resumes_once_space_is_freed(
    tmp_path, reference
):
    """The workdir on a real tmpfs, filled so that about one checkpoint more fits (the sizes
    on tmpfs are estimated): orbax's real failure path (its writer threads), not an injected
    error."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    try:
        one = _tree_bytes(os.path.join(reference[0], "checkpoints", "16"))
        free = shutil.disk_usage(disk).free
        filler = disk / "filler"
        with open(filler, "wb") as f:  # room for ~1.5 checkpoints and the logs
            f.write(b"\0" * (free - int(1.5 * one) - 64 * 1024))
        workdir = str(disk / "run")
        result = faulty(workdir, {})
        assert result.returncode == 2, result.stderr[-3000:]
        errors = [x for x in result.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        found = re.match(r"error: checkpoint (\d+) could not be written .*newest committed: "
                         r"(\d+)\)", errors[0])
        assert found, errors[0]
        failed, newest = int(found.group(1)), int(found.group(2))
        assert failed > newest >= 5 and committed(workdir)[-1] == newest
        assert "RESOURCE_EXHAUSTED" in errors[0] or "No space left" in errors[0]
        state, data, step = final_state(workdir, make_config())
        assert step == newest and int(state.step) == newest  # committed, intact
        os.remove(filler)  # the space is back: the same command resumes and finishes
        result = faulty(workdir, {})
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"resuming from checkpoint {newest}" in result.stderr
        assert_ends_like(reference, workdir)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# SCRIPT with one more fault: {"readonly_at": step} makes the checkpoint directory read-only
# once the saves before `step` are committed, so that saving `step` fails before orbax's
# temporary folder exists (the case where orbax's writer threads waited ~300 s).
READONLY = r"""
import json, os, sys
from wgan_jax import checkpoint as _ckpt
_at = json.loads(sys.argv[3]).get("readonly_at")
_save = _ckpt.Checkpointer.save

def _readonly_then_save(self, step, *args, **kwargs):
    if step == _at:
        self.wait()
        os.chmod(self.directory, 0o555)
    return _save(self, step, *args, **kwargs)

_ckpt.Checkpointer.save = _readonly_then_save
""" + SCRIPT


@pytest.mark.slow
def test_unwritable_checkpoint_directory_is_one_line_within_seconds(tmp_path, reference):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root ignores permissions and setpriv (to drop that) is missing")
    # As root, drop the capability to ignore file permissions, as a normal user has none.
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
              if os.geteuid() == 0 else [])
    workdir = str(tmp_path / "run")
    started = time.monotonic()
    result = subprocess.run(
        [*prefix, sys.executable, "-c", READONLY, workdir, json.dumps(TINY),
         json.dumps({"readonly_at": 10})],
        capture_output=True, text=True, timeout=240, env=_env(1), cwd=REPO)
    seconds = time.monotonic() - started  # the timeout above is a hang guard (was 300 s)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith("error: checkpoint 10 could not be written"), errors[0]
    assert "Permission denied" in errors[0] and "newest committed: 5" in errors[0]
    assert not glob.glob(os.path.join(workdir, "checkpoints", "10*"))
    print(f"unwritable checkpoint directory: exit 2 after {seconds:.1f} s")
    os.chmod(os.path.join(workdir, "checkpoints"), 0o755)
    summary = train.train_and_evaluate(make_config(), workdir, pictures=False)
    assert summary["start_step"] == 5 and summary["step"] == 16
    assert_ends_like(reference, workdir)
