"""Deciding together: with several processes, every decision about checkpoints that could
part them is taken by all of them at once.

Each process reports what it found (`vote`, a collective) and all take the same branch: the
steps to consider (`agree_on_steps`: listings gathered), each candidate's outcome
(`read_agreed`: every process reads alone, then one vote, retries included), moving a step
aside (`move_aside`), a save's folder check (`check_writable`), creating the checkpoint
directory and any fatal error (`agreed_failure`). A process that decided alone would leave
the others waiting in a collective it skips. With one process these are plain checks.

Faults are told apart here too: a read that fails with an I/O error (`OSError`, or a
TensorStore status such as UNAVAILABLE, e.g. on a network file system) is the storage's
fault (`is_io_error`): retried `READ_ATTEMPTS` times, then one `UserError`, nothing set aside.
Anything else is the content's fault: the step is reported unreadable.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from wgan_jax import fs
from wgan_jax.errors import UserError

log = logging.getLogger("wgan_jax")

READ_ATTEMPTS = 4  # reads of one checkpoint that fail with an I/O error before giving up
READ_BACKOFF_SECONDS = 0.25  # doubled after every failed attempt

# TensorStore (orbax's array reader and writer) reports errors as `ValueError("CODE: ...")`;
# these codes are the storage's fault (errno-derived or remote), not the content's.
_IO_STATUS = re.compile(
    r"^(UNAVAILABLE|DEADLINE_EXCEEDED|PERMISSION_DENIED|RESOURCE_EXHAUSTED|ABORTED|"
    r"UNAUTHENTICATED): "
)
_STATUS = re.compile(r"^[A-Z][A-Z_]+: ")

_OK, _CONTENT, _IO = 0, 1, 2
_REASON_BYTES = 1000
_DIGEST_BYTES = 16


# ---- telling faults apart -------------------------------------------------------------------


def is_io_error(error: BaseException) -> bool:
    """Whether `error` (or an exception it wraps) is a storage failure rather than bad content.

    `OSError`s count, except a missing file: inside a committed checkpoint that means the
    checkpoint is incomplete, which is its content's fault.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and not isinstance(current, FileNotFoundError):
            return True
        if _IO_STATUS.match(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def reason(error: BaseException) -> str:
    """`Type: first line` of `error`, or of the TensorStore status it wraps (orbax's own
    message for those is a repr of the whole array spec)."""
    current: BaseException | None = error
    while current is not None:
        if _STATUS.match(str(current)):
            error = current
            break
        current = current.__cause__ or current.__context__
    return f"{type(error).__name__}: {_first_line(error)}"[:200]


# ---- the collectives ------------------------------------------------------------------------


def _allgather(row: np.ndarray) -> np.ndarray:
    """`[process_count, *row.shape]`: every process's `row` (a collective every process calls)."""
    if jax.process_count() == 1:
        return row[None]
    return np.asarray(multihost_utils.process_allgather(row))


def vote(kind: int, why: str, digest: bytes) -> list[tuple[int, str, bytes]]:
    """Every process's `(kind, reason, digest)`, in process order (a collective)."""
    encoded = why.encode()[:_REASON_BYTES]
    row = np.zeros(1 + _DIGEST_BYTES + _REASON_BYTES, np.int32)
    row[0] = kind
    row[1: 1 + len(digest[:_DIGEST_BYTES])] = list(digest[:_DIGEST_BYTES])
    row[1 + _DIGEST_BYTES: 1 + _DIGEST_BYTES + len(encoded)] = list(encoded)
    votes = []
    for other in _allgather(row):
        text = bytes(int(b) for b in other[1 + _DIGEST_BYTES:] if b).decode(errors="replace")
        votes.append((int(other[0]), text, bytes(int(b) for b in other[1: 1 + _DIGEST_BYTES])))
    return votes


def any_process(flag: bool) -> bool:
    """Whether `flag` holds on any process (a collective with several processes)."""
    if jax.process_count() == 1:
        return flag
    return bool(_allgather(np.asarray([int(flag)], np.int32)).max())


def on_process(index: int) -> str:
    return f" on process {index}" if jax.process_count() > 1 else ""


def agreed_failure(local: str) -> str:
    """The first process's non-empty failure message, the same on every process ("" if none
    failed): a collective with several processes."""
    if jax.process_count() == 1:
        return local
    return next((why or "failed on another process"
                 for kind, why, _ in vote(_IO if local else _OK, local, b"") if kind), "")


# ---- the decisions --------------------------------------------------------------------------


def create_directory(directory: str) -> None:
    """Process 0 creates the checkpoint directory; a failure stops every process with the
    same line (orbax would raise on process 0 alone and leave the others in a barrier)."""
    failure = ""
    if jax.process_index() == 0 and not fs.is_remote(directory):
        try:
            fs.makedirs(directory)
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied", directory)
        except OSError as error:
            failure = (f"checkpoint directory {directory} cannot be written "
                       f"({reason(error)}); fix its permissions or choose another "
                       "--workdir")
    failure = agreed_failure(failure)
    if failure:
        raise UserError(failure)


def agree_on_steps(directory: str, local: list[int]) -> tuple[list[int], list[int]]:
    """(the steps every process lists, newest first; the steps only some list).

    A stale listing on one process (a network file system's cache) must not make the
    processes restore different steps: they use the common ones and say so in one line.
    """
    if jax.process_count() == 1:
        return list(reversed(local)), []
    width = int(_allgather(np.asarray([len(local)], np.int32)).max())
    padded = np.full(max(width, 1), -1, np.int32)
    padded[: len(local)] = local
    listings = [{int(s) for s in row if s >= 0} for row in _allgather(padded)]
    common = set.intersection(*listings)
    unlisted = sorted(set.union(*listings) - common)
    if unlisted and jax.process_index() == 0:
        seen = "; ".join(f"process {i}: {sorted(x)[-5:]}" for i, x in enumerate(listings))
        log.warning("checkpoint listings in %s differ between processes (%s): using the "
                    "newest step every process lists (%s); newer ones are moved aside "
                    "as <step>.unlisted-<time>", directory, seen,
                    max(common) if common else "none")
    return sorted(common, reverse=True), unlisted


def _read_voted(
    step: int, read: Callable[[], tuple[Any, dict[str, Any], bytes]]
) -> tuple[tuple[Any, dict[str, Any], bytes] | None, list[tuple[int, str, bytes]]]:
    """`(this process's read or None, the last votes)`: `read()` on every process, an I/O
    error on any retried by all, `READ_ATTEMPTS` in all."""
    result: tuple[Any, dict[str, Any], bytes] | None = None
    for attempt in range(1, READ_ATTEMPTS + 1):
        kind, why = _OK, ""
        if result is None:
            try:
                result = read()
            except Exception as error:  # noqa: BLE001 - classified, then voted on
                kind = _IO if is_io_error(error) else _CONTENT
                why = reason(error)
        votes = vote(kind, why, result[2] if result is not None else b"")
        io = [(i, r) for i, (k, r, _) in enumerate(votes) if k == _IO]
        if io and attempt < READ_ATTEMPTS:
            delay = READ_BACKOFF_SECONDS * 2 ** (attempt - 1)
            log.warning("checkpoint %d: I/O error while reading%s (%s); retrying in %.2g s",
                        step, on_process(io[0][0]), io[0][1], delay)
            time.sleep(delay)
            continue
        break
    return result, votes


def read_agreed(
    directory: str, step: int, read: Callable[[], tuple[Any, dict[str, Any], bytes]]
) -> tuple[Any, dict[str, Any]] | str:
    """Reads `step` on every process (`read()`: host state, data, digest) and returns what
    all of them decide together: `(host_state, data)` when every process read it correctly
    and identically, else the reason it is unreadable (content). An I/O error on any process
    is retried by all (`READ_ATTEMPTS` in all) and then stops every process with the same
    `UserError`.
    """
    result, votes = _read_voted(step, read)
    io = [(i, r) for i, (k, r, _) in enumerate(votes) if k == _IO]
    if io:
        where, why = io[0]
        raise UserError(
            f"checkpoint {step} in {directory} cannot be read{on_process(where)}: "
            f"I/O error in {READ_ATTEMPTS} attempts ({why}); nothing was set aside, check "
            "the file system and run again"
        )
    content = [(i, r) for i, (k, r, _) in enumerate(votes) if k == _CONTENT]
    if content:
        where, why = content[0]
        return f"{why}{on_process(where)}"
    if len({digest for _, _, digest in votes}) > 1:
        return "the processes read different contents"
    assert result is not None
    return result[0], result[1]


def move_aside(directory: str, step: int, why: str, suffix: str = "corrupt") -> None:
    """Process 0 renames an unreadable step to `<step>.<suffix>-<time>`, so later saves of
    that step number are possible.

    If the move fails, the checkpoint is left where it is (never deleted) and a
    `UserError` stops the run on every process: resuming past it would save over it.
    """
    path = fs.join(directory, str(step))
    failure = ""
    if jax.process_index() == 0:
        try:
            fs.rename(path, f"{path}.{suffix}-{int(time.time())}")
        except OSError as error:
            failure = reason(error)
    failure = agreed_failure(failure)
    if failure:
        raise UserError(
            f"checkpoint {step} in {directory} is unreadable ({why[:120]}) and "
            f"could not be moved aside ({failure}); it was kept: move {path} away by hand "
            "and run again"
        )


def check_writable(directory: str) -> None:
    """Raises the `OSError` a save would meet creating its folder (no permission, a
    vanished or read-only directory), checked by every process (each writes there: a
    mount can differ between hosts) and decided together: every process raises the same
    error, naming the first process that met it.

    Checked before orbax starts: orbax's writer threads wait ~300 s for a folder that a
    failed creation never makes, and keep the process from exiting until then.
    """
    local: OSError | None = None
    if not fs.is_remote(directory):
        if not os.path.isdir(directory):
            local = OSError(2, "No such file or directory (it vanished)", directory)
        elif not os.access(directory, os.W_OK | os.X_OK):
            local = PermissionError(13, "Permission denied", directory)
    if jax.process_count() == 1:
        if local is not None:
            raise local
        return
    votes = vote(_IO if local else _OK, str(local) if local else "", b"")
    failed = [(i, why) for i, (kind, why, _) in enumerate(votes) if kind]
    if failed:
        where, why = failed[0]
        raise OSError(f"{why}{on_process(where)}")
