"""A parent process that outlives its trainer, for multi-process runs of `wgan_jax.main`.

JAX's coordination service ends a process from C++ when a peer is lost: at once when the
coordinator (process 0) dies, after the heartbeat timeout when another process stops
answering. Such a process prints an absl `F...` line and a C++ stack and dies of SIGABRT; no
Python code of it runs again. So `main` forks before it loads JAX (`supervise`): the child
trains; the parent waits, forwards SIGTERM, and when the child dies without a word it prints
the one line the child could not (the process lost, read from JAX's own message; the
iteration and the newest committed checkpoint, from the child's `faults.ProgressRecord` in
shared memory) and exits with `cli.EXIT_PEER_LOST`.

The child's C-level stderr (file descriptor 2: XLA's and JAX's C++ logs, a fatal error's
stack) goes to a file, and Python's `sys.stderr` (the run's log lines, tracebacks) to the
terminal; the file is deleted after a successful run and kept under `WORKDIR/faults/`
otherwise. The child dies with the parent (`PR_SET_PDEATHSIG`), as on a lost machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

from wgan_jax import faults
from wgan_jax.cli import EXIT_PEER_LOST, EXIT_USAGE

__all__ = ["lost_in_native_log", "supervise"]

_TAIL_BYTES = 256 * 1024
_PR_SET_PDEATHSIG = 1
_JAX_FATAL = "Terminating process because the JAX distributed service detected fatal errors"


def supervise(workdir: str, process: str, count: int | None) -> int | None:
    """Forks. In the child returns None (it goes on to train); in the parent waits for the
    child and returns the exit status to end with. Returns None without forking, with a
    warning, where a fork is unsafe (threads already run, JAX already loaded: a config file
    that imports it) or missing."""
    unsafe = ("no os.fork here" if not hasattr(os, "fork") else
              "other threads run" if threading.active_count() > 1 else
              "JAX is already loaded" if "jax" in sys.modules else "")
    if unsafe:
        logging.getLogger("wgan_jax").warning(
            "this process is not supervised (%s): if JAX's runtime ends it (a lost "
            "coordinator), its own C++ message is all it says", unsafe)
        return None
    record = faults.ProgressRecord.shared()
    capture, capture_path = tempfile.mkstemp(prefix=f"wgan_jax-process{process}-",
                                             suffix="-native.log")
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _become_child(capture, record, parent)
        return None
    os.close(capture)
    return _wait(pid, capture_path, record, workdir, process, count)


# ---- the child ------------------------------------------------------------------------------


def _become_child(capture: int, record: faults.ProgressRecord, parent: int) -> None:
    """Dies with the parent; C-level stderr to `capture`, Python's to the terminal."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    terminal = os.dup(2)
    os.dup2(capture, 2)
    os.close(capture)
    old = sys.stderr
    sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding=getattr(old, "encoding", None),
                           errors="backslashreplace")
    for handler in _handlers():
        if isinstance(handler, logging.StreamHandler) and handler.stream is old:
            handler.setStream(sys.stderr)
    faults.install_record(record)


def _handlers() -> list[logging.Handler]:
    """Every logging handler (absl's wraps a stream handler of its own)."""
    found: list[logging.Handler] = []
    loggers = [logging.getLogger(), *(x for x in logging.root.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            found.append(handler)
            inner = getattr(handler, "python_handler", None)
            if isinstance(inner, logging.Handler):
                found.append(inner)
    return found


# ---- the parent -----------------------------------------------------------------------------


def _wait(pid: int, capture_path: str, record: faults.ProgressRecord, workdir: str,
          process: str, count: int | None) -> int:
    """Forwards SIGTERM to the child, waits for it and says what it could not."""
    signal.signal(signal.SIGTERM, lambda signum, frame: _forward(pid, signum))
    # Ctrl-C on a terminal reaches the child (same process group); the parent must not die
    # of it, which would kill the child at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return 1
    code = os.waitstatus_to_exitcode(status)
    if code in (0, EXIT_USAGE) or _empty(capture_path):  # success, bad input: no faults/
        with contextlib.suppress(OSError):
            os.remove(capture_path)
        kept = ""
    else:
        kept = _keep(capture_path, workdir, process)
    if code in (0, EXIT_USAGE):
        return code
    if record.printed:  # the child said it, and exited (or JAX aborted it right after)
        return record.code
    if code > 0:  # an exit status of its own (its line, or its traceback, is on the terminal)
        return code
    native = _tail(kept) if kept else ""
    where = f" at iteration {record.step}" if record.step is not None else " during setup"
    newest = faults.newest_checkpoint_on_disk(os.path.join(workdir, "checkpoints"))
    newest = newest if newest is not None else record.committed
    details = f" (details: {kept})" if kept else ""
    advice = (f"newest committed checkpoint: {newest if newest is not None else 'none'}; "
              f"rerun the same command on every host to resume{details}")
    lost = lost_in_native_log(native)
    if lost is not None:
        who, how = lost
        of = f" of {count}" if count else ""
        _say(f"error: lost {who}{of}{where} ({how}); {advice}")
        return EXIT_PEER_LOST
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = " (out of memory, or killed)" if -code == signal.SIGKILL else ""
    _say(f"error: the trainer process {process} died of {name}{why}{where}; {advice}")
    return 128 - code


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _keep(capture_path: str, workdir: str, process: str) -> str:
    """Moves the child's C-level log under `WORKDIR/faults/` (when the workdir is local and
    exists); returns where it is."""
    if not workdir or not os.path.isdir(workdir):
        return capture_path
    directory = faults.faults_directory(workdir)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = os.path.join(directory, f"process{process}-{stamp}-native.log")
    try:
        os.makedirs(directory, exist_ok=True)
        shutil.move(capture_path, target)
    except OSError:
        return capture_path
    return target


def _empty(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return True


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - _TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def lost_in_native_log(text: str) -> tuple[str, str] | None:
    """`(who, how)` when JAX's coordination service ended the process because a peer was
    lost (its fatal message in the C-level log `text`), else None."""
    if _JAX_FATAL not in text and "Polled an error from coordination service" not in text:
        return None
    unhealthy = re.search(r"unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)", text)
    timeout = re.findall(r"Task (\d+) heartbeat timeout", text)
    ids = sorted({int(x) for x in re.findall(r"\d+", unhealthy.group(1))} if unhealthy
                 else {int(x) for x in timeout})
    if ids:
        who = ("the coordinator (process 0)" if ids == [0] else
               "process" + ("es " if len(ids) > 1 else " ") + ", ".join(map(str, ids)))
        return who, "no heartbeat within faults.peer_timeout_seconds; JAX ended this process"
    if re.search(r"Failed to send RPC to coordination service|leader task", text):
        return ("the coordinator (process 0)",
                "its coordination service stopped answering; JAX ended this process")
    return "a process (which one is not known)", "JAX's coordination service ended this process"
