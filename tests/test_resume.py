"""Resume, preemption, elastic restore and the divergence guard, on a tiny toy run.

Subprocesses only where a process must die or see 8 devices; everything else runs
`train_and_evaluate` in-process.
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
from conftest import REPO, cpu_env
from jax.experimental.compilation_cache import compilation_cache as cc

from wgan_jax import checkpoint as ckpt
from wgan_jax import checkpoint_content, input_pipeline, train
from wgan_jax.config import get_config_schema
from wgan_jax.errors import UserError
from wgan_jax.step import make_mesh

TINY = {
    "num_iterations": 16, "global_batch_size": 32, "n_critic": 2, "model.width": 16,
    "model.depth": 2, "log_every": 4, "checkpoint_every": 5, "keep_checkpoints": 2,
    "sample_every": 0, "plot_every": 0, "diagnostics.level": "off",
}

# A run in a fresh interpreter: argv[1] = workdir, [2] = config overrides (JSON), [3] = faults
# (JSON): {"kill_at": position} SIGKILLs before serving that data position,
# {"kill_in_save": step} SIGKILLs while checkpoint `step` is being written (its data item
# written, the checkpoint not committed), {"enospc_at": step} makes writing checkpoint `step`
# fail with "No space left on device". Exits as `wgan_jax.main` does (UserError: one line, 2).
SCRIPT = r"""
import errno, json, os, signal, sys
from etils import epath
from wgan_jax import cli, input_pipeline, records, train
from wgan_jax.config import get_config_schema

cli.setup_logging(True)
workdir, overrides, faults = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
config = get_config_schema()
for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value

original_write_text = epath.Path.write_text

def write_text(self, text, *args, **kwargs):
    # The file of each JSON item of the faulty checkpoint (orbax writes them through etils).
    target = f"{os.sep}{faults.get('enospc_at', faults.get('kill_in_save'))}."
    faulty = target in str(self) and self.name == "metadata"
    if faulty and "enospc_at" in faults:
        raise OSError(errno.ENOSPC, "No space left on device")
    result = original_write_text(self, text, *args, **kwargs)
    if faulty and "kill_in_save" in faults and '"position"' in text:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

epath.Path.write_text = write_text
create = input_pipeline.create_input_pipeline

class Killing:
    def __init__(self, it):
        self.it = it
    def __getattr__(self, name):
        return getattr(self.it, name)
    def __iter__(self):
        return self
    def __next__(self):
        if self.it.position == faults.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        return next(self.it)

input_pipeline.create_input_pipeline = lambda c, mesh: Killing(create(c, mesh))
sys.exit(cli.run_guarded(
    lambda: print(json.dumps(train.train_and_evaluate(config, workdir, pictures=False)["step"]))))
"""


def make_config(**overrides):
    c = get_config_schema()
    for key, value in {**TINY, **overrides}.items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c


def _env(devices: int = 1) -> dict:
    env = cpu_env(devices)
    if _CACHE_DIR:
        env["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    return env


_CACHE_DIR = ""


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """One persistent compilation cache for this module's runs (in-process and subprocesses):
    the same tiny step is otherwise compiled about ten times. Cached executables are the
    compiled ones, so bitwise comparisons are unaffected."""
    global _CACHE_DIR
    _CACHE_DIR = str(tmp_path_factory.mktemp("jax_cache"))
    saved = {name: getattr(jax.config, name) for name in (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes")}
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    cc.reset_cache()
    cc.set_cache_dir(_CACHE_DIR)
    yield
    cc.reset_cache()
    for name, value in saved.items():
        jax.config.update(name, value)
    _CACHE_DIR = ""


def _script(workdir: str, overrides: dict, kill_at: int = -1, devices: int = 1):
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, workdir, json.dumps({**TINY, **overrides}),
         json.dumps({"kill_at": kill_at})],
        capture_output=True, text=True, timeout=1200, env=_env(devices), cwd=REPO,
    )


def final_state(workdir: str, config, step: int | None = None):
    mesh = make_mesh()
    reader = ckpt.Checkpointer(workdir, read_only=True)
    try:
        restored = reader.restore(
            train.abstract_train_state(train.build_gan(config), config, mesh), step
        )
    finally:
        reader.close()
    return restored


def assert_bitwise_equal(a, b):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def events(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    config = make_config()
    reference = str(tmp_path / "reference")
    assert train.train_and_evaluate(config, reference, pictures=False)["step"] == 16

    # Killed right after starting the asynchronous save of step 10 (likely mid-write).
    interrupted = str(tmp_path / "interrupted")
    result = _script(interrupted, {}, kill_at=10)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    summary = train.train_and_evaluate(config, interrupted, pictures=False)
    assert summary["step"] == 16 and summary["start_step"] in (5, 10)

    ref_state, ref_data, ref_step = final_state(reference, config)
    state, data, step = final_state(interrupted, config)
    assert ref_step == step == 16 and data == ref_data
    assert_bitwise_equal(ref_state, state)


@pytest.mark.slow
def test_sigterm_saves_exits_zero_and_resumes(tmp_path):
    workdir = str(tmp_path / "run")
    flags = [f"--config.{k}={v}" for k, v in {**TINY, "num_iterations": 100000,
                                              "checkpoint_every": 0, "log_every": 2}.items()]
    process = subprocess.Popen(
        [sys.executable, "-m", "wgan_jax.main", "--config=configs/toy_25gaussians.py",
         "--workdir", workdir, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO,
    )
    metrics = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + 1200
    while not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    latency = time.monotonic() - sent
    assert process.returncode == 0, stderr[-3000:]
    assert latency < 30, f"SIGTERM to exit took {latency:.1f} s"
    print(f"SIGTERM exit latency: {latency:.2f} s")

    reader = ckpt.Checkpointer(workdir, read_only=True)
    steps = reader.all_steps()
    reader.close()
    assert len(steps) == 1 and steps[0] > 0
    stopped = steps[0]
    assert f"checkpoint {stopped} committed" in stderr
    with open(metrics) as f:
        assert json.loads(f.readlines()[-1])["step"] == stopped

    summary = train.train_and_evaluate(make_config(num_iterations=stopped + 2,
                                                   checkpoint_every=0, log_every=2), workdir,
                                       pictures=False)
    assert summary["start_step"] == stopped and summary["step"] == stopped + 2
    assert any(e["rule"] == "resume" and e["step"] == stopped for e in events(workdir))

    # The sample CLI reads the same manager: latest, or a step; best needs an evaluation.
    from wgan_jax import runs

    for which, expected in (("latest", stopped + 2), (str(stopped), stopped)):
        _, gan, state, step = runs.load_run(workdir, which)
        assert step == expected
    assert runs.generate_samples(gan, state, 7, seed=0).shape == (7, 2)
    with pytest.raises(UserError, match="no best checkpoint"):
        runs.load_run(workdir, "best")


@pytest.mark.slow
def test_elastic_restore_between_1_and_8_devices(tmp_path):
    workdir = str(tmp_path / "run")
    config = make_config(num_iterations=4)
    assert train.train_and_evaluate(config, workdir, pictures=False)["step"] == 4
    result = _script(workdir, {"num_iterations": 8}, devices=8)  # 1 -> 8 devices, trains on
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == 8
    assert "global_devices=8" in result.stderr and "resuming from checkpoint 4" in result.stderr

    restored, data, step = final_state(workdir, make_config(), 8)  # written on 8, read on 1
    assert step == 8 and data["position"] == 8 and checkpoint_content.all_finite(restored)
    config = make_config(num_iterations=10)
    summary = train.train_and_evaluate(config, workdir, pictures=False)  # 8 -> 1
    assert summary["start_step"] == 8 and summary["step"] == 10
    state, data, step = final_state(workdir, make_config())
    assert step == 10 and data["position"] == 10 and checkpoint_content.all_finite(state)


class _Poisoned:
    """Serves NaN batches the first time each position in `positions` (or all from `forever`)
    is served; a replay after a rollback is clean unless `forever`."""

    def __init__(self, it, positions=(), forever: int | None = None):
        self.it = it
        self.positions = set(positions)
        self.forever = forever

    def __getattr__(self, name):
        return getattr(self.it, name)

    def __iter__(self):
        return self

    def __next__(self):
        position = self.it.position
        batch = next(self.it)
        poison = position in self.positions or (self.forever is not None
                                                and position >= self.forever)
        self.positions.discard(position)
        return batch * np.nan if poison else batch


def _poison(monkeypatch, **kwargs):
    create = input_pipeline.create_input_pipeline
    monkeypatch.setattr(input_pipeline, "create_input_pipeline",
                        lambda c, mesh: _Poisoned(create(c, mesh), **kwargs))


@pytest.mark.slow
def test_nan_updates_are_skipped_then_rolled_back(tmp_path, monkeypatch):
    # Iteration 7 (position 6): 2 critic updates skipped, below the limit of 3: no rollback.
    # Iteration 8: 4 consecutive -> roll back to checkpoint 4 with halved learning rates.
    _poison(monkeypatch, positions=(6, 7))
    workdir = str(tmp_path / "run")
    config = make_config(num_iterations=14, log_every=1, checkpoint_every=4,
                         max_consecutive_nonfinite=3, max_rollbacks=2)
    summary = train.train_and_evaluate(config, workdir, pictures=False)
    assert summary["step"] == 14 and summary["rollbacks"] == 1 and summary["lr_scale"] == 0.5

    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert any(r["step"] == 7 and r["nonfinite_skipped"] == 2 for r in rows)
    (rollback,) = [e for e in events(workdir) if e["rule"] == "rollback"]
    assert rollback["step"] == 8 and rollback["evidence"]["to_step"] == 4
    assert rollback["evidence"]["lr_scale"] == 0.5

    reader = ckpt.Checkpointer(workdir, read_only=True)
    abstract = train.abstract_train_state(train.build_gan(config), config, make_mesh())
    for step in reader.all_steps():
        state, data, _ = reader.restore(abstract, step)
        assert checkpoint_content.all_finite(state), f"checkpoint {step} holds a non-finite value"
    assert data["guard"]["lr_scale"] == 0.5 and data["guard"]["rollbacks"] == 1
    reader.close()


@pytest.mark.slow
def test_divergence_gives_up_after_max_rollbacks(tmp_path, monkeypatch):
    _poison(monkeypatch, forever=2)
    config = make_config(num_iterations=10, log_every=1, checkpoint_every=2,
                         max_consecutive_nonfinite=2, max_rollbacks=1)
    workdir = str(tmp_path / "run")
    with pytest.raises(UserError, match="diverged .* after 1 rollbacks"):
        train.train_and_evaluate(config, workdir, pictures=False)
    assert [e["rule"] for e in events(workdir) if e["rule"] == "rollback"] == ["rollback"] * 2
    reader = ckpt.Checkpointer(workdir, read_only=True)
    assert reader.all_steps() == [2]
    reader.close()
