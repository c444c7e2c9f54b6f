"""The workdir lock: one trainer per workdir, taken by process 0, its outcome agreed by all.

Two trainers writing the same checkpoints would overwrite each other's steps; `lock_workdir`
stops the second one in one line on every process (`checkpoint_agreement.agreed_failure`).
"""

from __future__ import annotations

import fcntl
import logging
import os
from typing import TextIO

import jax

from wgan_jax import fs
from wgan_jax.checkpoint_agreement import agreed_failure, reason
from wgan_jax.errors import UserError

log = logging.getLogger("wgan_jax")


class WorkdirLock:
    """An exclusive lock on a workdir, so two trainers never write the same checkpoints.

    `flock` is released by the kernel when the process dies, so a killed trainer never leaves
    a stale lock behind. Object stores have no such lock: for a URL workdir (`gs://...`)
    `acquire` logs that and locks nothing.
    """

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.path = fs.join(workdir, ".lock")
        self._file: TextIO | None = None

    def acquire(self) -> None:
        if fs.is_remote(self.workdir):
            log.info("workdir %s is remote: not locked (object stores have no file locks); "
                     "make sure no other trainer uses it", self.workdir)
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            handle = open(self.path, "a+")  # noqa: SIM115 - held for the process's lifetime
        except OSError as error:
            raise UserError(
                f"workdir {self.workdir} cannot be written: its lock file {self.path} cannot "
                f"be created ({reason(error)}); choose a writable --workdir"
            ) from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise UserError(
                f"workdir {os.path.dirname(self.path)} is in use by a running trainer "
                f"({owner}); stop it or choose another --workdir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def lock_workdir(workdir: str) -> WorkdirLock | None:
    """Process 0 creates `workdir` and takes its lock; every process learns the outcome.

    A failure (a workdir in use, not writable, or a file) stops every process with the same
    `UserError`, so no process waits for one that gave up. Returns process 0's lock (None on
    the others).
    """
    lock = None
    failure = ""
    if jax.process_index() == 0:
        try:
            fs.makedirs(workdir)
            lock = WorkdirLock(workdir)
            lock.acquire()
        except UserError as error:
            lock, failure = None, str(error)
        except OSError as error:
            lock = None
            failure = (f"workdir {workdir} cannot be created ({reason(error)}); choose a "
                       "writable --workdir")
    failure = agreed_failure(failure)
    if failure:
        if lock is not None:
            lock.release()
        raise UserError(failure)
    return lock
