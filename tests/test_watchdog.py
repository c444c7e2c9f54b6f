"""The pieces of issue 36's fault handling, without a multi-process run: the watchdog's bound
and phases (a fake clock), the exit of a hung single process (a subprocess), how JAX's fatal
messages and collective errors are read, the progress record a supervisor shares, and the
exit statuses' one place. The 2-process cases are `tests/test_peer_faults.py`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import REPO

from wgan_jax import cli, faults, supervisor
from wgan_jax.faults import Overdue, ProgressRecord, Watchdog, WatchdogBounds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bound_is_factor_times_the_median_iteration_or_seconds():
    clock = Clock()
    late: list[Overdue] = []
    dog = Watchdog(WatchdogBounds(seconds=10.0, factor=20.0), late.append, clock=clock)
    assert dog.bound() == 10.0  # no iteration yet
    for duration in (0.2, 1.0, 0.6):  # median 0.6 s: 20 x 0.6 = 12 s > 10 s
        with dog.phase("step", iteration=True):
            clock.now += duration
    assert dog.median() == pytest.approx(0.6) and dog.bound() == pytest.approx(12.0)
    with dog.phase("saving checkpoint 3"):
        clock.now += 11.9
        assert dog.overdue() is None
        clock.now += 0.2
        over = dog.overdue()
        assert over is not None and over.phase == "saving checkpoint 3"
        assert over.waited == pytest.approx(12.1) and over.bound == pytest.approx(12.0)
    assert dog.overdue() is None and dog.current() is None  # no phase: nothing to be late


def test_unwatched_and_nested_phases_and_off():
    clock = Clock()
    dog = Watchdog(WatchdogBounds(seconds=5.0, factor=20.0), lambda late: None, clock=clock)
    with dog.phase("step 1", iteration=True, watched=False):  # compiling: never overdue
        clock.now += 100
        assert dog.overdue() is None
    assert dog.median() == 0.0  # and it does not count towards the median
    with dog.phase("step 2", iteration=True):
        clock.now += 4
        with dog.phase("evaluating", watched=False):
            clock.now += 100
            assert dog.overdue() is None
        assert dog.current() == "step 2"  # the outer phase's clock restarts after the inner
        clock.now += 4
        assert dog.overdue() is None
        clock.now += 2
        assert dog.overdue() is not None
    off = Watchdog(WatchdogBounds(seconds=0.0, factor=20.0), lambda late: None, clock=clock)
    with off.phase("step 1"):
        clock.now += 1e6
        assert off.overdue() is None


HUNG = textwrap.dedent("""
    import sys, time
    from wgan_jax import faults
    workdir = sys.argv[1]

    def stuck_read():
        time.sleep(600)  # a read of a stuck mount

    with faults.RunGuard(workdir, faults.WatchdogBounds(seconds=1.0, factor=20.0)) as guard:
        guard.committed(40)
        with guard.phase("step 42", step=42, iteration=True):
            stuck_read()
""")


@pytest.mark.slow
def test_a_hung_single_process_ends_in_one_line_with_every_threads_stack(tmp_path):
    workdir = str(tmp_path / "run")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", HUNG, workdir], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    seconds = time.monotonic() - started
    assert result.returncode == cli.EXIT_HUNG, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: hung: step 42 has run 1 s, past the watchdog's bound of "
                           "1 s (max(20 x median iteration 0 s, 1 s), faults.watchdog); "
                           "newest committed checkpoint: 40; stop any hung process"), line
    path = line.rsplit("(details: ", 1)[1].rstrip(")")
    assert os.path.dirname(path) == os.path.join(workdir, "faults")
    with open(path) as f:
        details = f.read()
    assert "in stuck_read" in details and "Every thread's stack" in details, details
    assert seconds < 60, seconds  # a hang guard: it exits ~1 s after the bound


# The fatal lines of JAX's coordination service (jax 0.10.2 and 0.12), as a survivor's C-level
# stderr holds them.
COORDINATOR_GONE = (
    "F1125 05:13:10.483 16133 client.h:80] Terminating process because the JAX distributed "
    "service detected fatal errors. This most likely indicates that another task died; ... "
    "absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader "
    "task was preempted/died/restarted unexpectedly or this task is experiencing network "
    "issues.")
PEER_SILENT = (
    "E1125 04:52:50.273873 26083 coordination_service.cc:1549] Use error polling to propagate "
    "the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy "
    "(stopped sending heartbeats):\n1\nThe tasks have crashed.\n"
    "F1125 04:52:50.274244 26094 client.h:80] Terminating process because the JAX "
    "distributed service detected fatal errors. ... Task 1 heartbeat timeout.")


def test_the_process_lost_is_read_from_jaxs_fatal_message():
    assert supervisor.lost_in_native_log(COORDINATOR_GONE)[0] == "the coordinator (process 0)"
    assert supervisor.lost_in_native_log(PEER_SILENT)[0] == "process 1"
    assert supervisor.lost_in_native_log(
        PEER_SILENT.replace(":\n1\n", ":\n2, 3\n").replace("Task 1", "Task 2"))[0] == (
        "processes 2, 3")
    assert supervisor.lost_in_native_log("W1125 gloo warning\n*** SIGSEGV ***") is None


class JaxRuntimeError(RuntimeError):
    """Named as JAX's (the check goes by name: this module loads no JAX)."""


@pytest.mark.parametrize("error, lost", [
    (JaxRuntimeError("UNKNOWN: Gloo all-reduce failed: [pair.cc:547] Connection closed by "
                     "peer [127.0.0.1]:44455"), True),
    (ValueError("UNKNOWN: Gloo AllGather failed: [pair.cc:538] Read error [127.0.0.1]:9908: "
                "Connection reset by peer"), True),  # jax 0.12 raises a ValueError
    (TimeoutError("Timed out while waiting for async_write_complete barrier."), True),
    (JaxRuntimeError("UNAVAILABLE: Failed to send RPC to coordination service"), True),
    (ValueError("UNAVAILABLE: not a peer"), False),  # a storage status: not a collective
    (JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB"), False),
    (KeyError("critic_loss"), False),
])
def test_collective_failures_are_told_from_other_errors(error, lost):
    assert faults.collective_failure(error) is lost
    try:
        raise RuntimeError("wrapped") from error
    except RuntimeError as wrapper:
        assert faults.collective_failure(wrapper) is lost


@pytest.mark.filterwarnings("ignore:os.fork")  # JAX's warning; the child only writes memory
def test_the_progress_record_survives_a_fork():
    shared = ProgressRecord.shared()
    assert (shared.step, shared.committed, shared.code, shared.printed) == (None, None, 0, False)
    pid = os.fork()
    if pid == 0:  # the child writes, as the trainer does
        shared.write(step=46)
        shared.write(committed=40)
        shared.write(code=cli.EXIT_PEER_LOST, printed=1)
        os._exit(0)
    os.waitpid(pid, 0)
    assert (shared.step, shared.committed, shared.code, shared.printed) == (
        46, 40, cli.EXIT_PEER_LOST, True)


def test_exit_statuses_are_distinct_and_documented():
    codes = {name: getattr(cli, name) for name in dir(cli) if name.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes)
    with open(os.path.join(REPO, "docs", "command-line.md")) as f:
        text = f.read()
    for name, code in codes.items():
        assert f"| {code} |" in text and name in text, name


def test_newest_checkpoint_on_disk_counts_committed_steps_only(tmp_path):
    for name in ("10", "20", "30.orbax-checkpoint-tmp-17", "25.corrupt-1"):
        (tmp_path / name).mkdir()
    (tmp_path / "40").write_text("a file, not a checkpoint")
    assert faults.newest_checkpoint_on_disk(str(tmp_path)) == 20
    assert faults.newest_checkpoint_on_disk(str(tmp_path / "missing")) is None
    assert faults.newest_checkpoint_on_disk("gs://bucket/run/checkpoints") is None
