"""Faults that strike one process of a running 2-process run on localhost (issue 36): a
process SIGKILLed (process 1, then the coordinator, process 0), a checkpoint write that fails
on process 1 alone, process 1 frozen by SIGSTOP.

Each case launches `python -m wgan_jax.main` twice on localhost (1 CPU device each), injects
the fault mid-run and asserts: the exit statuses (`cli.EXIT_*`), exactly one line besides the
run's usual log lines on each surviving process's stderr (no traceback, no C++ stack), the
time from the fault to the exit against the documented bound plus slack for this loaded
machine, the committed checkpoints intact, and that the same command run again resumes from
the newest one, its first iterations' metrics equal to those the run had computed before the
fault. Every process is killed in a `finally` (its whole session: the supervisor and the
trainer it forked).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from test_multihost import CONFIG, _free_port
from test_resume import _env, compilation_cache, events  # noqa: F401 - a fixture

from wgan_jax.cli import EXIT_HUNG, EXIT_PEER_LOST, EXIT_USAGE

pytestmark = pytest.mark.slow

ITERATIONS = 40
FLAGS = [f"--config={CONFIG}", f"--config.num_iterations={ITERATIONS}",
         "--config.model.width=32", "--config.model.depth=2", "--config.global_batch_size=32",
         "--config.n_critic=2", "--config.checkpoint_every=10", "--config.keep_checkpoints=4",
         "--config.log_every=1", "--config.sample_every=0", "--config.plot_every=0",
         "--config.diagnostics.level=off"]
HANG_GUARD_SECONDS = 300  # a hang guard only: each launch takes ~20-40 s on the loaded box
SLACK_SECONDS = 15  # for a loaded 2-core machine shared by several jobs
PEER_TIMEOUT = 30  # the default faults.peer_timeout_seconds (the bound on a lost peer)
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d ")  # the run's usual log lines

# `wgan_jax.main` with process 1's write of checkpoint 20 failing: etils' public
# `epath.Path.write_text` (orbax writes each process's array metadata with it, in its
# background thread) raises an I/O error, after noting the time in argv[1].
WRITE_FAULT = r"""
import errno, sys, time
from etils import epath
stamp = sys.argv.pop(1)
original = epath.Path.write_text

def write_text(self, text, *args, **kwargs):
    name = str(self)
    if "--process_id=1" in sys.argv and "/20.orbax-checkpoint-tmp" in name and (
            "array_metadatas" in name):
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        raise OSError(errno.EIO, "Input/output error", name)
    return original(self, text, *args, **kwargs)

epath.Path.write_text = write_text
from wgan_jax import main
main.run()
"""


def _launch(workdir: str, extra: tuple[str, ...] = (), code: str | None = None,
            stamp: str = "") -> list[subprocess.Popen]:
    port = _free_port()
    head = [sys.executable, "-c", code, stamp] if code else [sys.executable, "-m",
                                                              "wgan_jax.main"]
    return [subprocess.Popen(
        [*head, *FLAGS, *extra, f"--workdir={workdir}",
         f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(1), cwd=REPO,
        start_new_session=True) for i in range(2)]


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def _rows(workdir: str) -> dict[int, dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by the SIGKILL
                pass
    return {r["step"]: {k: v for k, v in r.items() if k != "steps_per_second"} for r in rows
            if "critic_loss" in r}


def _committed(workdir: str) -> list[int]:
    checkpoints = os.path.join(workdir, "checkpoints")
    return sorted(int(n) for n in os.listdir(checkpoints) if n.isdigit())


def _wait_until_running(workdir: str, procs: list[subprocess.Popen], committed: int,
                        step: int) -> None:
    """Until checkpoint `committed` is committed and process 0 logged iteration `step`."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while not (committed in _committed_or_none(workdir) and max(_rows(workdir), default=0)
               >= step):
        assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
        assert time.monotonic() < deadline, "the run did not reach the fault"
        time.sleep(0.05)


def _committed_or_none(workdir: str) -> list[int]:
    try:
        return _committed(workdir)
    except OSError:
        return []


def _wait_exit(procs: list[subprocess.Popen], indices: list[int]) -> dict[int, float]:
    """`{index: time.time() of its exit}` for the processes `indices` (polled)."""
    ended: dict[int, float] = {}
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while len(ended) < len(indices):
        for i in indices:
            if i not in ended and procs[i].poll() is not None:
                ended[i] = time.time()
        assert time.monotonic() < deadline, f"processes {indices} did not exit"
        time.sleep(0.02)
    return ended


def _stderr(proc: subprocess.Popen) -> str:
    return proc.communicate(timeout=60)[1]


def _one_line(stderr: str) -> str:
    """The one line a process printed besides the run's usual log lines."""
    lines = [x for x in stderr.splitlines() if x.strip() and not LOG_LINE.match(x)]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _rerun_resumes(workdir: str, before: dict[int, dict], newest: int) -> None:
    """The same command again: both processes resume from `newest` and finish; the iterations
    after it equal those the interrupted run had computed."""
    procs = _launch(workdir)
    try:
        _wait_exit(procs, [0, 1])
        stderr = [_stderr(p) for p in procs]
    finally:
        _kill_all(procs)
    assert [p.returncode for p in procs] == [0, 0], [e[-3000:] for e in stderr]
    assert f"resuming from checkpoint {newest}" in stderr[0]
    after = _rows(workdir)
    assert max(after) == ITERATIONS and _committed(workdir)[-1] == ITERATIONS
    redone = [s for s in before if s > newest]
    assert redone, (newest, sorted(before))
    for step in redone:  # the same numbers as before the fault, bit for bit
        assert after[step] == before[step], step


def _lost_peer_case(tmp_path, victim: int) -> None:
    workdir = str(tmp_path / "run")
    procs = _launch(workdir)
    survivor = 1 - victim
    try:
        _wait_until_running(workdir, procs, committed=20, step=22)
        os.kill(procs[victim].pid, signal.SIGKILL)  # the supervisor; the trainer dies with it
        killed = time.time()
        ended = _wait_exit(procs, [victim, survivor])
        stderr = _stderr(procs[survivor])
    finally:
        _kill_all(procs)
    seconds = ended[survivor] - killed
    print(f"SIGKILL of process {victim}: process {survivor} exited {seconds:.1f} s later")
    assert procs[survivor].returncode == EXIT_PEER_LOST, stderr[-3000:]
    line = _one_line(stderr)
    who = "the coordinator \\(process 0\\)" if victim == 0 else "process 1"
    found = re.match(rf"error: lost {who} of 2 at iteration (\d+) \(.+\); newest committed "
                     r"checkpoint: (\d+); rerun the same command on every host to resume "
                     r"\(details: (.+)\)$", line)
    assert found, line
    newest = _committed(workdir)[-1]
    assert int(found.group(1)) >= 22 and int(found.group(2)) == newest >= 20, line
    assert os.path.exists(found.group(3)), line
    assert seconds <= PEER_TIMEOUT + SLACK_SECONDS, seconds
    if survivor == 0:  # process 0 records it for `diagnose`
        (event,) = [e for e in events(workdir) if e["rule"] == "lost_peer"]
        assert event["step"] == int(found.group(1)) and "lost process 1" in event["message"]
    _rerun_resumes(workdir, _rows(workdir), newest)


def test_sigkill_of_process_1_mid_run_is_one_line_on_the_survivor_and_the_rerun_resumes(
    tmp_path
):
    _lost_peer_case(tmp_path, victim=1)


def test_sigkill_of_the_coordinator_mid_run_is_one_line_on_the_survivor_and_the_rerun_resumes(
    tmp_path
):
    _lost_peer_case(tmp_path, victim=0)


def test_a_write_failing_on_process_1_mid_run_stops_both_with_the_same_line(tmp_path):
    workdir = str(tmp_path / "run")
    stamp = str(tmp_path / "injected")
    procs = _launch(workdir, code=WRITE_FAULT, stamp=stamp)
    try:
        ended = _wait_exit(procs, [0, 1])
        stderr = [_stderr(p) for p in procs]
    finally:
        _kill_all(procs)
    assert os.path.exists(stamp), "the write was never attempted: " + stderr[1][-2000:]
    with open(stamp) as f:
        injected = float(f.read())
    seconds = max(ended.values()) - injected
    print(f"a write failing on process 1: both exited {seconds:.1f} s later")
    assert [p.returncode for p in procs] == [EXIT_USAGE] * 2, [e[-3000:] for e in stderr]
    lines = [_one_line(e) for e in stderr]
    assert lines[0] == lines[1], lines
    assert lines[0].startswith("error: checkpoint 20 could not be written to "), lines[0]
    assert "on process 1 (OSError: [Errno 5] Input/output error" in lines[0]
    assert "newest committed: 10" in lines[0]
    assert seconds <= 90, seconds
    assert _committed(workdir) == [10]  # what was committed before the failure survives
    _rerun_resumes(workdir, _rows(workdir), 10)


@pytest.mark.parametrize("found_by", ["watchdog", "heartbeat"])
def test_a_frozen_process_is_found_by_the_watchdog_or_the_heartbeat(tmp_path, found_by):
    """SIGSTOP of process 1 (its supervisor and trainer): process 0 waits in a collective until
    its watchdog (10 s, below the peer timeout of 60 s) writes every thread's stack and ends
    it, exit 4; or, with the watchdog off, until JAX's heartbeat (a peer timeout of 10 s) ends
    it, exit 3. The frozen one is killed by the test."""
    workdir = str(tmp_path / "run")
    bound = 10
    watchdog, peer_timeout = (bound, 60) if found_by == "watchdog" else (0, bound)
    extra = (f"--config.faults.watchdog.seconds={watchdog}",
             f"--config.faults.peer_timeout_seconds={peer_timeout}")
    procs = _launch(workdir, extra)
    try:
        _wait_until_running(workdir, procs, committed=20, step=22)
        os.killpg(procs[1].pid, signal.SIGSTOP)
        stopped = time.time()
        ended = _wait_exit(procs, [0])
        stderr = _stderr(procs[0])
    finally:
        _kill_all(procs)
    seconds = ended[0] - stopped
    print(f"SIGSTOP of process 1 ({found_by}): process 0 exited {seconds:.1f} s later")
    line = _one_line(stderr)
    newest = _committed(workdir)[-1]
    if found_by == "watchdog":
        assert procs[0].returncode == EXIT_HUNG, stderr[-3000:]
        found = re.match(rf"error: hung: (step \d+|saving checkpoint \d+) has run \d+ s, past "
                         rf"the watchdog's bound of {bound} s \(.+\); process 1 has not answered "
                         r"for \d+ s; newest committed checkpoint: (\d+); stop any hung process, "
                         r"then rerun the same command on every host to resume \(details: (.+)\)$",
                         line)
        assert found, line
        assert bound - 1 <= seconds, seconds
    else:
        assert procs[0].returncode == EXIT_PEER_LOST, stderr[-3000:]
        found = re.match(r"error: lost (process 1) of 2 at iteration \d+ \(no heartbeat within "
                         r"faults.peer_timeout_seconds; JAX ended this process\); newest committed "
                         r"checkpoint: (\d+); rerun the same command on every host to resume "
                         r"\(details: (.+)\)$", line)
        assert found, line
    assert int(found.group(2)) == newest >= 20, line
    with open(found.group(3)) as f:
        details = f.read()
    # The stacks: the watchdog's own dump; JAX's fatal error and Python's dump after it.
    assert "Thread 0x" in details, details[:2000]
    if found_by == "watchdog":
        (event,) = [e for e in events(workdir) if e["rule"] == "hung"]
        assert event["evidence"]["details"] == found.group(3)
    assert seconds <= bound + SLACK_SECONDS, seconds
    _rerun_resumes(workdir, _rows(workdir), newest)
