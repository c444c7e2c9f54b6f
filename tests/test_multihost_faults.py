"""Faults that only one process of a 2-process run meets, on localhost: every process must
restore the same step or stop with the same line (`Checkpointer.restore` decides together).

A TINY single-process run writes checkpoints 15 and 16; a copy of its workdir is resumed by
2 processes (1 CPU device each) to step 18, with a fault injected on process 1 only by the
driver below: its reads of checkpoint 16's data item see an edited position (a corrupt step
only it sees), or fail with an I/O error every time, or its listing lacks step 16 (a stale
directory listing). Each driver prints its run's summary as JSON.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import REPO
from test_multihost import _free_port
from test_resume import (  # noqa: F401 - fixtures used by name
    TINY,
    _env,
    compilation_cache,
    events,
    final_state,
    make_config,
)

from wgan_jax import checkpoint as ckpt
from wgan_jax import train, workdir_lock

pytestmark = pytest.mark.slow

HANG_GUARD_SECONDS = 300  # a hang guard only: the runs take ~20-40 s on a loaded 2-core box

# argv: workdir, process id, coordinator port, fault ("none", "corrupt", "io", "listing",
# "unwritable").
DRIVER = r"""
import errno, json, sys
import jax
workdir, pid, port, fault = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
import orbax.checkpoint as ocp
from wgan_jax import checkpoint as ckpt
from wgan_jax import checkpoint_agreement
from wgan_jax import cli, records, train
from wgan_jax.config import get_config_schema

cli.setup_logging(pid == 0)
config = get_config_schema()
for key, value in json.loads(sys.argv[5]).items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value

original = ocp.JsonCheckpointHandler.restore

def restore(self, directory, *args, **kwargs):
    data = original(self, directory, *args, **kwargs)
    if str(directory).endswith("/16/data"):
        if fault == "corrupt":
            data = {**data, "position": data["position"] + 1}
        if fault == "io":
            raise OSError(errno.EIO, "Input/output error")
    return data

steps = ckpt.Checkpointer.all_steps
if pid == 1 and fault == "unwritable":  # this host's mount of the checkpoints is read-only
    import os
    access = os.access
    os.access = lambda path, mode: (not str(path).endswith("/checkpoints")
                                    and access(path, mode))
if pid == 1 and fault in ("corrupt", "io"):
    ocp.JsonCheckpointHandler.restore = restore
if pid == 1 and fault == "listing":
    ckpt.Checkpointer.all_steps = lambda self: [s for s in steps(self) if s != 16]
checkpoint_agreement.READ_BACKOFF_SECONDS = 0.05

def body():
    summary = train.train_and_evaluate(config, workdir, pictures=False)
    print(json.dumps({"start": summary["start_step"], "step": summary["step"]}), flush=True)

sys.exit(cli.run_guarded(body))
"""


@pytest.fixture(scope="module")
def checkpoints_15_16(tmp_path_factory, compilation_cache):  # noqa: F811 - imported fixture
    """A TINY run's workdir (checkpoints 15 and 16), written by one process."""
    workdir = str(tmp_path_factory.mktemp("written") / "run")
    assert train.train_and_evaluate(make_config(), workdir, pictures=False)["step"] == 16
    return workdir


def _resume_two_processes(source: str, workdir: str, fault: str):
    """Both processes of a 2-process resume to step 18; returns ([returncode], [stdout],
    [stderr], seconds)."""
    shutil.copytree(source, workdir)
    port = str(_free_port())
    overrides = json.dumps({**TINY, "num_iterations": 18})
    start = time.monotonic()
    procs = [subprocess.Popen(
        [sys.executable, "-c", DRIVER, workdir, str(i), port, fault, overrides],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(1), cwd=REPO)
        for i in range(2)]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=HANG_GUARD_SECONDS))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    seconds = time.monotonic() - start
    return ([p.returncode for p in procs], [o for o, _ in outputs], [e for _, e in outputs],
            seconds)


def _summaries(stdouts: list[str]) -> list[dict]:
    return [json.loads(out.strip().splitlines()[-1]) for out in stdouts]


def _committed(workdir: str) -> list[int]:
    reader = ckpt.Checkpointer(workdir, read_only=True)
    try:
        return reader.all_steps()
    finally:
        reader.close()


def test_a_corrupt_step_seen_by_one_process_is_set_aside_by_both(tmp_path, checkpoints_15_16):
    workdir = str(tmp_path / "run")
    codes, out, err, seconds = _resume_two_processes(checkpoints_15_16, workdir, "corrupt")
    assert codes == [0, 0], [e[-3000:] for e in err]
    assert _summaries(out) == [{"start": 15, "step": 18}] * 2, seconds
    assert "resuming from checkpoint 15" in err[0]
    (event,) = [e for e in events(workdir) if e["rule"] == "checkpoint"]
    assert event["evidence"]["skipped_step"] == 16
    assert "on process 1" in event["message"] and "fingerprint" in event["message"]
    # Nothing lost: the step is kept aside (the resumed run saved 18).
    assert glob.glob(os.path.join(workdir, "checkpoints", "16.corrupt-*", "state"))
    assert _committed(workdir) == [15, 18]
    state, data, step = final_state(workdir, make_config())
    assert step == 18 and int(state.step) == 18


def test_a_persistent_io_error_on_one_process_stops_both_with_one_line(
    tmp_path, checkpoints_15_16
):
    workdir = str(tmp_path / "run")
    codes, _, err, seconds = _resume_two_processes(checkpoints_15_16, workdir, "io")
    assert codes == [2, 2], [e[-3000:] for e in err]
    lines = [[x for x in e.splitlines() if x.startswith("error:")] for e in err]
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    (line,) = lines[0]
    assert "checkpoint 16" in line and "on process 1" in line and "Input/output" in line
    assert "nothing was set aside" in line
    assert not any("Traceback" in e for e in err)
    assert _committed(workdir) == [15, 16]
    assert not glob.glob(os.path.join(workdir, "checkpoints", "*.corrupt-*"))
    print(f"both processes stopped {seconds:.1f} s after launch")


def test_a_checkpoint_directory_unwritable_on_one_process_stops_both_with_one_line(
    tmp_path, checkpoints_15_16
):
    """Every process checks that it can write the checkpoint directory before a save; a
    failure on process 1 alone stops both with the same line, nothing lost."""
    workdir = str(tmp_path / "run")
    codes, _, err, seconds = _resume_two_processes(checkpoints_15_16, workdir, "unwritable")
    assert codes == [2, 2], [e[-3000:] for e in err]
    lines = [[x for x in e.splitlines() if x.startswith("error:")] for e in err]
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    (line,) = lines[0]
    assert "checkpoint 18 could not be written" in line and "on process 1" in line, line
    assert "Permission denied" in line and "newest committed: 16" in line, line
    assert not any("Traceback" in e for e in err)
    assert _committed(workdir) == [15, 16]
    print(f"both processes stopped {seconds:.1f} s after launch")


def test_different_listings_resume_both_from_the_newest_common_step(
    tmp_path, checkpoints_15_16
):
    workdir = str(tmp_path / "run")
    codes, out, err, seconds = _resume_two_processes(checkpoints_15_16, workdir, "listing")
    assert codes == [0, 0], [e[-3000:] for e in err]
    assert _summaries(out) == [{"start": 15, "step": 18}] * 2, seconds
    (said,) = [x for x in err[0].splitlines() if "differ between processes" in x]
    assert "process 0: [15, 16]; process 1: [15]" in said
    # Kept aside, not deleted.
    assert glob.glob(os.path.join(workdir, "checkpoints", "16.unlisted-*", "state"))
    assert _committed(workdir) == [15, 18]


def test_a_workdir_in_use_stops_both_processes_with_the_same_line(tmp_path):
    """Only process 0 takes the workdir lock; when it cannot, process 1 must not wait."""
    workdir = str(tmp_path / "run")
    lock = workdir_lock.WorkdirLock(workdir)
    lock.acquire()
    try:
        port = str(_free_port())
        overrides = json.dumps({**TINY, "num_iterations": 2})
        procs = [subprocess.Popen(
            [sys.executable, "-c", DRIVER, workdir, str(i), port, "none", overrides],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(1), cwd=REPO)
            for i in range(2)]
        err = []
        for proc in procs:
            try:
                err.append(proc.communicate(timeout=HANG_GUARD_SECONDS)[1])
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise
    finally:
        lock.release()
    assert [p.returncode for p in procs] == [2, 2], [e[-2000:] for e in err]
    lines = [[x for x in e.splitlines() if x.startswith("error:")] for e in err]
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    assert "in use by a running trainer" in lines[0][0] and f"pid {os.getpid()}" in lines[0][0]
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))
