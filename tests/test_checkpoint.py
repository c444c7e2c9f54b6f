"""Checkpointer: newest-N plus best retention, best.json, corruption fallback, finiteness, lock."""

from __future__ import annotations

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO, run_module

from wgan_jax import checkpoint as ckpt
from wgan_jax import checkpoint_agreement, checkpoint_content, workdir_lock
from wgan_jax.checkpoint_best import lower_is_better
from wgan_jax.errors import UserError


def _state(value: float) -> dict:
    return {"w": jnp.full((3, 4), value, jnp.float32), "n": jnp.asarray(int(value), jnp.int32)}


def _abstract() -> dict:
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), _state(0.0)
    )


def test_best_retention_keeps_newest_and_best(tmp_path):
    workdir = str(tmp_path)
    fid = {2: 1.0, 4: 5.0, 6: 3.0}  # step 2 stays best
    c = ckpt.Checkpointer(workdir, keep=2, best_metric="fid")  # "fid" means "eval/fid"
    for step in range(1, 8):
        metrics = {"eval/fid": fid[step]} if step in fid else None
        assert c.save(step, _state(step), {"position": step}, metrics)
        kept = c.all_steps()
        assert step in kept, "the newest checkpoint must never be removed"
    c.wait()
    assert c.all_steps() == [2, 6, 7]
    assert c.best() == {"step": 2, "metric": "eval/fid", "value": 1.0}
    with open(os.path.join(workdir, "checkpoints", "best.json")) as f:
        assert json.load(f)["step"] == 2
    c.close()

    # A restarted run (metric taken from best.json) keeps the best one while saving more.
    c = ckpt.Checkpointer(workdir, keep=2)
    assert c.best_metric == "eval/fid"
    for step in range(8, 11):
        c.save(step, _state(step), {"position": step})
    c.wait()
    assert c.all_steps() == [2, 9, 10]
    restored, data, step = c.restore(_abstract(), 2)
    assert step == 2 and data["position"] == 2 and float(restored["w"][0, 0]) == 2.0
    c.close()


def test_best_checkpoint_higher_is_better(tmp_path):
    c = ckpt.Checkpointer(str(tmp_path), keep=1, best_metric="eval/modes")
    c.save(1, _state(1), {"position": 1}, {"eval/modes": 20.0, "eval/kl": 0.5})
    c.save(2, _state(2), {"position": 2}, {"eval/modes": 25.0, "eval/kl": 0.4})
    c.save(3, _state(3), {"position": 3}, {"eval/modes": 22.0, "eval/kl": 0.3})
    c.wait()
    assert c.best_metric == "eval/modes"
    assert c.best()["step"] == 2
    assert c.all_steps() == [2, 3]
    c.close()


def _best_json(workdir: str) -> dict:
    with open(os.path.join(workdir, "checkpoints", "best.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("first_eval_at", [3, 5])
def test_best_json_of_an_earlier_metric_name_carries_over(tmp_path, first_eval_at):
    """A run from before metric names carried their feature space recorded `eval/fid`; resumed
    with the plan's `eval/fid_digits`, its best checkpoint and value stay in the running (kept
    until the first evaluation under the new name) and only a better value replaces them."""
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir, keep=2, best_metric="fid")
    c.save(1, _state(1), {"position": 1}, {"eval/fid": 1.0})
    c.save(2, _state(2), {"position": 2})
    c.close()
    c = ckpt.Checkpointer(workdir, keep=2, best_metric="eval/fid_digits")
    fids = {first_eval_at: 2.0, first_eval_at + 1: 0.5}  # worse, then better than 1.0
    for step in range(3, first_eval_at + 2):
        c.save(step, _state(step), {"position": step},
               {"eval/fid_digits": fids[step]} if step in fids else None)
        c.wait()
        if step <= first_eval_at:
            assert _best_json(workdir) == {"step": 1, "metric": "eval/fid", "value": 1.0}
            assert 1 in c.all_steps() or step == first_eval_at  # the old best is kept until then
    assert c.best_metric == "eval/fid_digits"
    assert _best_json(workdir) == {"step": first_eval_at + 1, "metric": "eval/fid_digits",
                                   "value": 0.5}
    c.close()


def test_a_resumed_run_keeps_the_metric_and_value_of_its_best_json(tmp_path):
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir, keep=2, best_metric="eval/kid_digits")
    c.save(1, _state(1), {"position": 1}, {"eval/kid_digits": 0.3, "eval/fid_digits": 9.0})
    c.close()
    c = ckpt.Checkpointer(workdir, keep=2, best_metric="eval/kid_digits")
    c.save(2, _state(2), {"position": 2}, {"eval/kid_digits": 0.4, "eval/fid_digits": 1.0})
    c.wait()
    assert c.best() == {"step": 1, "metric": "eval/kid_digits", "value": 0.3}
    c.close()
    # Another metric (the config changed) starts its own record: any value beats none.
    other = ckpt.Checkpointer(workdir, keep=2, best_metric="eval/fid_digits")
    other.save(3, _state(3), {"position": 3}, {"eval/kid_digits": 0.9, "eval/fid_digits": 5.0})
    other.wait()
    assert _best_json(workdir) == {"step": 3, "metric": "eval/fid_digits", "value": 5.0}
    other.close()


def test_truncated_newest_checkpoint_falls_back_to_previous(tmp_path, caplog):
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir, keep=3)
    for step in (1, 2):
        c.save(step, _state(step), {"position": step})
    c.close()
    # Truncate the newest checkpoint's array metadata, as a crash or a full disk would.
    (victim,) = glob.glob(os.path.join(workdir, "checkpoints", "2", "state", "_METADATA"))
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)

    c = ckpt.Checkpointer(workdir, keep=3)
    with caplog.at_level("WARNING", logger="wgan_jax"):
        restored, data, step = c.restore(_abstract())
    assert step == 1 and data["position"] == 1 and float(restored["w"][0, 0]) == 1.0
    lines = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "checkpoint 2" in lines[0]
    assert [s for s, _ in c.skipped] == [2]
    # Moved aside (not deleted), and the step number can be saved again.
    assert glob.glob(os.path.join(workdir, "checkpoints", "2.corrupt-*"))
    assert c.all_steps() == [1]
    assert c.save(2, _state(2.5), {"position": 2})
    c.wait()
    assert float(c.restore(_abstract())[0]["w"][0, 0]) == 2.5
    c.close()


def test_incomplete_checkpoint_is_ignored(tmp_path):
    """A save killed mid-write leaves only orbax's temporary directory: never used."""
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir)
    c.save(1, _state(1), {"position": 1})
    c.close()
    os.makedirs(os.path.join(workdir, "checkpoints", "2.orbax-checkpoint-tmp-123", "state"))
    c = ckpt.Checkpointer(workdir)
    assert c.restore(_abstract())[2] == 1
    c.close()


def test_explicit_step_that_cannot_be_read_is_a_user_error(tmp_path):
    c = ckpt.Checkpointer(str(tmp_path))
    c.save(1, _state(1), {"position": 1})
    c.close()
    with open(os.path.join(str(tmp_path), "checkpoints", "1", "state", "_METADATA"), "w") as f:
        f.write("{")
    reader = ckpt.Checkpointer(str(tmp_path), read_only=True)
    with pytest.raises(UserError, match="checkpoint 1 .* cannot be read"):
        reader.restore(_abstract(), 1)
    assert reader.all_steps() == [1]  # read-only never moves anything
    reader.close()


def test_nonfinite_state_is_never_saved(tmp_path):
    c = ckpt.Checkpointer(str(tmp_path))
    bad = _state(1.0)
    bad["w"] = bad["w"].at[0, 0].set(jnp.nan)
    assert not c.save(1, bad, {"position": 1})
    assert c.save(2, _state(2.0), {"position": 2})
    c.close()
    assert c.all_steps() == [2]
    assert checkpoint_content.all_finite(_state(1.0)) and not checkpoint_content.all_finite(bad)


def test_lower_is_better():
    assert lower_is_better("eval/fid") and lower_is_better("eval/w1")
    assert not lower_is_better("eval/modes") and not lower_is_better("eval/is")
    assert not lower_is_better("eval/recall")


@pytest.mark.slow
def test_workdir_lock_refuses_second_trainer(tmp_path):
    workdir = str(tmp_path / "run")
    lock = workdir_lock.WorkdirLock(workdir)
    lock.acquire()
    try:
        with pytest.raises(UserError, match="in use by a running trainer"):
            workdir_lock.WorkdirLock(workdir).acquire()
        result = run_module(["wgan_jax.main", "--config=configs/toy_25gaussians.py",
                             "--workdir", workdir,
                             "--config.num_iterations=2", "--config.model.width=8"],
                            timeout=1200, cwd=REPO)
        assert result.returncode == 2, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: workdir") and "in use" in last
        assert f"pid {os.getpid()}" in last
        assert not os.path.exists(os.path.join(workdir, "checkpoints"))
    finally:
        lock.release()
    again = workdir_lock.WorkdirLock(workdir)
    again.acquire()
    again.release()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_changed_model_is_a_user_error_and_moves_nothing(tmp_path):
    c = ckpt.Checkpointer(str(tmp_path))
    c.save(1, _state(1), {"position": 1})
    c.save(2, _state(2), {"position": 2})
    c.wait()
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    wider = {"w": jax.ShapeDtypeStruct((5, 4), jnp.float32, sharding=sharding),
             "n": jax.ShapeDtypeStruct((), jnp.int32, sharding=sharding)}
    with pytest.raises(UserError, match="no checkpoint .* can be restored .* config or model"):
        c.restore(wider)
    assert c.all_steps() == [1, 2] and not c.skipped
    c.close()


# ---- faults: nothing is lost (issue 17) --------------------------------------------------


def _two_checkpoints(workdir: str) -> None:
    c = ckpt.Checkpointer(workdir, keep=3)
    for step in (1, 2):
        c.save(step, _state(step), {"position": step})
    c.close()


def _corrupt_newest_metadata(workdir: str) -> None:
    with open(os.path.join(workdir, "checkpoints", "2", "state", "_METADATA"), "w") as f:
        f.write("{")


def test_checkpoint_that_cannot_be_moved_aside_is_kept(tmp_path, monkeypatch):
    workdir = str(tmp_path)
    _two_checkpoints(workdir)
    _corrupt_newest_metadata(workdir)

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(ckpt.fs, "rename", refuse)
    c = ckpt.Checkpointer(workdir, keep=3)
    with pytest.raises(UserError) as raised:
        c.restore(_abstract())
    message = str(raised.value)
    assert "\n" not in message and "checkpoint 2" in message
    assert "could not be moved aside" in message
    assert "Permission denied" in message and "kept" in message
    # Still there, in place, with all its files: nothing deleted, nothing half-moved.
    assert os.path.isfile(os.path.join(workdir, "checkpoints", "2", "state", "_METADATA"))
    assert not glob.glob(os.path.join(workdir, "checkpoints", "2.corrupt-*"))
    assert c.all_steps() == [1, 2]
    c.close()


def _failing_json_reads(monkeypatch, errors: list[BaseException]) -> list[str]:
    """The data item's reads raise `errors` one after another, then succeed; returns the
    directories read."""
    import orbax.checkpoint as ocp

    original = ocp.JsonCheckpointHandler.restore
    calls: list[str] = []

    def restore(self, directory, *args, **kwargs):
        if os.path.basename(str(directory)) != "data":  # orbax's metrics use it too
            return original(self, directory, *args, **kwargs)
        calls.append(str(directory))
        if errors:
            raise errors.pop(0)
        return original(self, directory, *args, **kwargs)

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "restore", restore)
    monkeypatch.setattr(checkpoint_agreement, "READ_BACKOFF_SECONDS", 0.0)
    return calls


@pytest.mark.parametrize("error", [
    OSError(5, "Input/output error"),
    OSError(116, "Stale file handle"),
    ValueError("UNAVAILABLE: Error reading local file: [OS error 5: Input/output error]"),
])
def test_transient_read_error_is_retried_and_the_same_checkpoint_used(
    tmp_path, monkeypatch, error
):
    workdir = str(tmp_path)
    _two_checkpoints(workdir)
    calls = _failing_json_reads(monkeypatch, [error, error])
    c = ckpt.Checkpointer(workdir, keep=3)
    restored, data, step = c.restore(_abstract())
    assert step == 2 and data["position"] == 2 and float(restored["w"][0, 0]) == 2.0
    assert len(calls) == 3 and all("/2" in d for d in calls)
    assert not c.skipped and c.all_steps() == [1, 2]
    assert not glob.glob(os.path.join(workdir, "checkpoints", "*.corrupt-*"))
    c.close()


def test_persistent_read_error_stops_in_one_line_and_sets_nothing_aside(
    tmp_path, monkeypatch, capsys
):
    from wgan_jax import cli

    workdir = str(tmp_path)
    _two_checkpoints(workdir)
    calls = _failing_json_reads(monkeypatch, [OSError(5, "Input/output error")] * 100)
    c = ckpt.Checkpointer(workdir, keep=3)
    with pytest.raises(SystemExit) as exited:
        cli.run_guarded(lambda: c.restore(_abstract()))
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: checkpoint 2 in ") and "Input/output error" in line
    assert "nothing was set aside" in line
    # Checkpoint 2 was tried READ_ATTEMPTS times; checkpoint 1 was never used instead.
    assert len(calls) == checkpoint_agreement.READ_ATTEMPTS and all("/2" in d for d in calls)
    assert not c.skipped and c.all_steps() == [1, 2]
    assert not glob.glob(os.path.join(workdir, "checkpoints", "*.corrupt-*"))
    c.close()


def test_corrupt_array_bytes_are_found_and_the_previous_checkpoint_used(tmp_path):
    """Flipped bytes inside the compressed array data read back without any error from the
    file format (silently wrong weights); the fingerprint saved with the data finds them."""
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir, keep=3)
    noise = {"w": jax.random.normal(jax.random.PRNGKey(0), (300, 40)),
             "n": jnp.asarray(0, jnp.int32)}
    for step in (1, 2):
        c.save(step, jax.tree.map(lambda x, s=step: x + s, noise), {"position": step})
    c.close()
    files = glob.glob(os.path.join(workdir, "checkpoints", "2", "state", "ocdbt.process_*",
                                   "d", "*"))
    data_file = max(files, key=os.path.getsize)
    size = os.path.getsize(data_file)
    with open(data_file, "r+b") as f:
        f.seek(size // 2)
        chunk = f.read(16)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), noise)
    c = ckpt.Checkpointer(workdir, keep=3)
    restored, data, step = c.restore(abstract)
    assert step == 1 and data == {"position": 1}
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.asarray(noise["w"] + 1))
    assert [s for s, _ in c.skipped] == [2] and "fingerprint" in c.skipped[0][1]
    assert glob.glob(os.path.join(workdir, "checkpoints", "2.corrupt-*"))
    c.close()


def test_fingerprint_sees_any_single_change():
    tree = {"f": jnp.linspace(-1, 1, 64, dtype=jnp.float32).reshape(8, 8),
            "b": jnp.arange(6, dtype=jnp.bfloat16), "k": jnp.array([7, 9], jnp.uint32),
            "m": jnp.array([True, False])}
    base = checkpoint_content.fingerprint(tree)
    assert len(base) == 4 and base == checkpoint_content.fingerprint(jax.tree.map(jnp.copy, tree))
    for key, index in (("f", (3, 5)), ("b", 2), ("k", 1), ("m", 1)):
        value = tree[key][index]
        changed = tree[key].at[index].set(~value if key == "m" else value + 1)
        assert checkpoint_content.fingerprint({**tree, key: changed}) != base, key
    swapped = tree["f"].at[0, 0].set(tree["f"][0, 1]).at[0, 1].set(tree["f"][0, 0])
    assert checkpoint_content.fingerprint({**tree, "f": swapped}) != base


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_disk_full_while_saving_is_one_line_and_keeps_committed_checkpoints(
    tmp_path, monkeypatch
):
    import errno

    from etils import epath

    original = epath.Path.write_text

    def write_text(self, *args, **kwargs):
        # The file of each JSON item (orbax's JsonCheckpointHandler writes it through etils'
        # public `Path.write_text`) of checkpoint 3.
        if f"{os.sep}3." in str(self) and self.name == "metadata":
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(epath.Path, "write_text", write_text)
    workdir = str(tmp_path)
    c = ckpt.Checkpointer(workdir, keep=2)
    c.save(1, _state(1), {"position": 1})
    c.save(2, _state(2), {"position": 2})
    c.save(3, _state(3), {"position": 3})  # fails in the background
    with pytest.raises(UserError) as raised:
        c.wait()
    message = str(raised.value)
    assert "\n" not in message and message.startswith("checkpoint 3 could not be written")
    assert "No space left on device" in message and "newest committed: 2" in message
    c.close()  # the failure was reported once; closing does not raise it again
    monkeypatch.setattr(epath.Path, "write_text", original)
    reader = ckpt.Checkpointer(workdir, keep=2)
    assert reader.all_steps() == [1, 2]  # retention deleted nothing for the failed save
    restored, data, step = reader.restore(_abstract())
    assert step == 2 and data == {"position": 2} and float(restored["w"][0, 0]) == 2.0
    reader.close()


@pytest.mark.slow
@pytest.mark.parametrize("read_only", ["workdir", "checkpoints"])
def test_read_only_workdir_is_one_line(tmp_path, read_only):
    """The lock file (or the checkpoint directory) cannot be written: one line, exit 2 (was a
    traceback, resp. ~300 s in orbax's threads). As root, the run drops the capability to
    ignore permissions, as a normal user has none."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root ignores permissions and setpriv (to drop that) is missing")
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
              if os.geteuid() == 0 else [])
    workdir = tmp_path / "run"
    workdir.mkdir()
    if read_only == "checkpoints":
        (workdir / "checkpoints").mkdir()
    (workdir / read_only if read_only == "checkpoints" else workdir).chmod(0o555)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "wgan_jax.main", "--config=configs/toy_25gaussians.py",
         f"--workdir={workdir}", "--config.num_iterations=2", "--config.model.width=8"],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "Permission denied" in line
    if read_only == "workdir":
        assert f"workdir {workdir} cannot be written" in line
        assert os.listdir(workdir) == []
    else:
        assert f"checkpoint directory {workdir / 'checkpoints'} cannot be written" in line
        assert os.listdir(workdir / "checkpoints") == []
