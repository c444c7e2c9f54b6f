"""Checkpointer: newest-N plus best retention, best.json, corruption fallback, finiteness, lock."""

from __future__ import annotations

import glob
import json
import os

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO, run_module

from wgan_jax import checkpoint as ckpt
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


def test_best_metric_chosen_automatically_higher_is_better(tmp_path):
    c = ckpt.Checkpointer(str(tmp_path), keep=1)
    c.save(1, _state(1), {"position": 1}, {"eval/modes": 20.0, "eval/kl": 0.5})
    c.save(2, _state(2), {"position": 2}, {"eval/modes": 25.0, "eval/kl": 0.4})
    c.save(3, _state(3), {"position": 3}, {"eval/modes": 22.0, "eval/kl": 0.3})
    c.wait()
    assert c.best_metric == "eval/modes"
    assert c.best()["step"] == 2
    assert c.all_steps() == [2, 3]
    c.close()


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
    assert ckpt.all_finite(_state(1.0)) and not ckpt.all_finite(bad)


def test_lower_is_better():
    assert ckpt.lower_is_better("eval/fid") and ckpt.lower_is_better("eval/w1")
    assert not ckpt.lower_is_better("eval/modes") and not ckpt.lower_is_better("eval/is")
    assert not ckpt.lower_is_better("eval/recall")


def test_workdir_lock_refuses_second_trainer(tmp_path):
    workdir = str(tmp_path / "run")
    lock = ckpt.WorkdirLock(workdir)
    lock.acquire()
    try:
        with pytest.raises(UserError, match="in use by a running trainer"):
            ckpt.WorkdirLock(workdir).acquire()
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
    again = ckpt.WorkdirLock(workdir)
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
