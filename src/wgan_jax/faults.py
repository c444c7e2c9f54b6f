"""Faults that strike during a run, and the one way out of a process that cannot go on.

A multi-process run cannot survive one process leaving it: the others wait in the next
collective. This module turns every such fault into one line on the terminal, a file with the
details (and every thread's stack) under `WORKDIR/faults/`, and an exit status of its own
(`cli.EXIT_*`), bounded in time:

- `Watchdog`: a phase (an iteration, a save, a restore) that runs longer than
  `max(factor x the median recent iteration, seconds)` (`config.faults.watchdog`) ends the
  process (`cli.EXIT_HUNG`). A thread watches, because a main thread stuck in a collective or
  a read cannot raise.
- `RunGuard`: one run's fault handling. It holds the watchdog, this process's progress (the
  iteration, the newest committed checkpoint: `ProgressRecord`, which a supervising parent
  reads, `wgan_jax.supervisor`) and, with several processes, the link to the others
  (`wgan_jax.peers.PeerLink`: a fatal error on one process is published to all, a peer that
  stopped answering is named). `RunGuard.fail` ends a process of a multi-process run on any
  error: a lost peer (`cli.EXIT_PEER_LOST`), a user error (`cli.EXIT_USAGE`, the same line on
  every process), anything else (status 1).

Every exit goes through `os._exit` after the line: JAX's shutdown barrier would otherwise wait
for the lost process (300 s) and abort with a C++ stack.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import mmap
import os
import re
import statistics
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, Protocol

from wgan_jax import fs, records
from wgan_jax.cli import EXIT_ERROR, EXIT_HUNG, EXIT_INTERRUPTED, EXIT_PEER_LOST, EXIT_USAGE
from wgan_jax.errors import UserError

__all__ = [
    "Fatal",
    "Overdue",
    "PeerLinkLike",
    "ProgressRecord",
    "RunGuard",
    "Watchdog",
    "WatchdogBounds",
    "collective_failure",
    "faults_directory",
    "install_record",
    "newest_checkpoint_on_disk",
    "record",
]

# Iterations whose durations the watchdog's median is taken over.
MEDIAN_WINDOW = 50
# A collective that fails because its peer went away (Gloo on CPU, NCCL): these words in any
# error mean a lost peer even before it is named (jax 0.10 raises `JaxRuntimeError`, 0.12 a
# `ValueError`). The weaker ones (the coordination service's RPCs, orbax's barriers) count in
# JAX's runtime errors and timeouts only.
_CONNECTION_LOST = re.compile(
    r"connection (closed|reset|refused)|closed by peer|broken pipe|socket closed|"
    r"Gloo \S+ failed|NCCL \S+ (error|failed)", re.IGNORECASE)
_RUNTIME_LOST = re.compile(
    r"\bUNAVAILABLE\b|\bABORTED\b|heartbeat|coordination service|barrier", re.IGNORECASE)
# How long a peer's counter must stand still before `RunGuard.fail` names it as the lost one.
SILENT_SECONDS = 2.0
# How long the coordinator waits for the others to read its fatal error before it exits (its
# exit ends JAX's coordination service, and with it every other process at once).
ACK_SECONDS = 5.0


# ---- this process's progress, shared with a supervising parent -----------------------------


class ProgressRecord:
    """The iteration this process is in, the newest checkpoint it knows committed and the exit
    status a fault exit chose (with whether it printed its line), in a buffer that
    `ProgressRecord.shared()` maps into memory shared with a forked parent
    (`wgan_jax.supervisor`), which reads it when this process dies without a word."""

    _FORMAT = "<qqii"
    SIZE = struct.calcsize(_FORMAT)

    def __init__(self, buffer: Any = None) -> None:
        self._buffer = buffer if buffer is not None else bytearray(self.SIZE)
        self.write(step=-1, committed=-1, code=0, printed=0)

    @classmethod
    def shared(cls) -> ProgressRecord:
        """A record in anonymous shared memory, inherited across `os.fork`."""
        return cls(mmap.mmap(-1, cls.SIZE))

    def read(self) -> tuple[int, int, int, int]:
        return struct.unpack_from(self._FORMAT, self._buffer, 0)

    def write(self, **values: int) -> None:
        step, committed, code, printed = self.read() if any(self._buffer) else (-1, -1, 0, 0)
        current = {"step": step, "committed": committed, "code": code, "printed": printed}
        current.update(values)
        struct.pack_into(self._FORMAT, self._buffer, 0, current["step"], current["committed"],
                         current["code"], current["printed"])

    @property
    def step(self) -> int | None:
        step = self.read()[0]
        return None if step < 0 else step

    @property
    def committed(self) -> int | None:
        committed = self.read()[1]
        return None if committed < 0 else committed

    @property
    def code(self) -> int:
        return self.read()[2]

    @property
    def printed(self) -> bool:
        return bool(self.read()[3])


_RECORD = ProgressRecord()


def record() -> ProgressRecord:
    """This process's progress record."""
    return _RECORD


def install_record(new: ProgressRecord) -> None:
    """Makes `new` this process's record (the supervisor's shared one)."""
    global _RECORD
    _RECORD = new


# ---- the checkpoints on disk ----------------------------------------------------------------


def newest_checkpoint_on_disk(directory: str, timeout: float = 2.0) -> int | None:
    """The newest committed checkpoint in a local checkpoint directory (orbax renames a
    checkpoint to its bare step number once every process wrote it), or None when there is
    none or it cannot be listed within `timeout` seconds (a stuck mount) or is remote."""
    if fs.is_remote(directory):
        return None
    found: list[int | None] = [None]

    def scan() -> None:
        with contextlib.suppress(OSError):
            steps = [int(n) for n in os.listdir(directory) if n.isdigit()
                     and os.path.isdir(os.path.join(directory, n))]
            found[0] = max(steps) if steps else None

    thread = threading.Thread(target=scan, name="wgan_jax-list-checkpoints", daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0]


def faults_directory(workdir: str) -> str:
    """Where the details of a fault go: `WORKDIR/faults/` for a local workdir, else a local
    temporary directory (a dying process does not write to an object store)."""
    if workdir and not fs.is_remote(workdir):
        return os.path.join(os.path.abspath(workdir), "faults")
    return os.path.join(tempfile.gettempdir(), "wgan_jax-faults")


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


# ---- the watchdog ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WatchdogBounds:
    """`config.faults.watchdog`: a watched phase may run `max(factor x median, seconds)`."""

    seconds: float  # 0: the watchdog is off
    factor: float

    @classmethod
    def from_config(cls, config: Any) -> WatchdogBounds:
        return cls(float(config.faults.watchdog.seconds), float(config.faults.watchdog.factor))


@dataclasses.dataclass(frozen=True)
class Overdue:
    """A phase that ran past its bound: its name, how long it ran, the bound, the median."""

    phase: str
    waited: float
    bound: float
    median: float


class Watchdog:
    """Times the phases the trainer enters (`phase`) and calls `on_overdue` from its own
    thread when the current one runs past `bound()`.

    Iterations (`iteration=True`) feed the median of the recent ones. Phases entered with
    `watched=False` (compiling, evaluating: their length has no scale) are never overdue.
    """

    def __init__(self, bounds: WatchdogBounds, on_overdue: Callable[[Overdue], Any], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds
        self._on_overdue = on_overdue
        self._clock = clock
        self._durations: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self._current: tuple[str, float, bool] | None = None  # (name, start, watched)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.bounds.seconds > 0

    def median(self) -> float:
        return statistics.median(self._durations) if self._durations else 0.0

    def bound(self) -> float:
        return max(self.bounds.factor * self.median(), self.bounds.seconds)

    @contextlib.contextmanager
    def phase(self, name: str, *, iteration: bool = False, watched: bool = True) -> Iterator[None]:
        """Times `name`; nested phases replace the outer one until they end (the outer one's
        clock then restarts)."""
        outer = self._current
        start = self._clock()
        self._current = (name, start, watched)
        try:
            yield
        finally:
            if iteration and watched:
                self._durations.append(self._clock() - start)
            self._current = (outer[0], self._clock(), outer[2]) if outer else None

    def current(self) -> str | None:
        return self._current[0] if self._current else None

    def overdue(self) -> Overdue | None:
        """The current phase, when it is watched and has run past the bound."""
        current = self._current
        if not self.enabled or current is None or not current[2]:
            return None
        waited, bound = self._clock() - current[1], self.bound()
        return Overdue(current[0], waited, bound, self.median()) if waited > bound else None

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        tick = min(1.0, max(0.05, self.bounds.seconds / 20))

        def watch() -> None:
            while not self._stop.wait(tick):
                late = self.overdue()
                if late is not None:
                    self._on_overdue(late)
                    return

        self._thread = threading.Thread(target=watch, name="wgan_jax-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None


# ---- the other processes --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fatal:
    """An error that ends the whole run, published by the process it struck (`origin`): the
    line every process prints and the status every process exits with."""

    origin: int
    code: int
    line: str


class PeerLinkLike(Protocol):
    """What `RunGuard` needs of `wgan_jax.peers.PeerLink` (this module loads no JAX)."""

    def start(self, on_fatal: Callable[[Fatal], Any]) -> None: ...
    def stop(self) -> None: ...
    def publish(self, fatal: Fatal) -> Fatal: ...
    def published(self) -> Fatal | None: ...
    def silent(self, seconds: float) -> dict[int, float]: ...
    def ack(self) -> None: ...
    def wait_for_acks(self, seconds: float, skip: set[int]) -> None: ...


def collective_failure(error: BaseException) -> bool:
    """Whether `error` (or one it wraps) is a collective or a coordination call that failed
    because a peer went away (its connection closed, the service unreachable)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        runtime = (type(current).__name__ in ("JaxRuntimeError", "XlaRuntimeError")
                   or isinstance(current, TimeoutError))
        if _CONNECTION_LOST.search(str(current)) or (runtime and _RUNTIME_LOST.search(
                str(current))):
            return True
        current = current.__cause__ or current.__context__
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.splitlines()[0].split())


# ---- one run's fault handling ---------------------------------------------------------------

# The first exit wins: a second caller (the watchdog, the peers' thread, the main thread)
# waits here for the process to end.
_EXITING = threading.Lock()


class RunGuard:
    """One run's fault handling: `with RunGuard(...) as guard:` starts the watchdog (and the
    link to the other processes), the trainer enters phases (`guard.phase`), reports the
    newest committed checkpoint (`guard.committed`), and on an error in a multi-process run
    hands it to `guard.fail`, which ends the process."""

    def __init__(self, workdir: str, bounds: WatchdogBounds, *, process: int = 0,
                 count: int = 1, peers: PeerLinkLike | None = None,
                 checkpoints: str = "") -> None:
        self.workdir = workdir
        self.process, self.count = process, count
        self.peers = peers
        self.checkpoints = checkpoints or os.path.join(workdir, "checkpoints")
        self.watchdog = Watchdog(bounds, self._hung)
        self._committed: int | None = None

    def __enter__(self) -> RunGuard:
        if self.peers is not None:
            self.peers.start(self._peer_fatal)
        self.watchdog.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.watchdog.stop()
        if self.peers is not None:
            self.peers.stop()

    # ---- what the trainer tells it ----

    @contextlib.contextmanager
    def phase(self, name: str, *, step: int | None = None, iteration: bool = False,
              watched: bool = True) -> Iterator[None]:
        if step is not None:
            record().write(step=step)
        with self.watchdog.phase(name, iteration=iteration, watched=watched):
            yield

    def committed(self, step: int | None) -> None:
        """`step` is known committed (a restore, a save waited for)."""
        if step is not None and (self._committed is None or step > self._committed):
            self._committed = step
            record().write(committed=step)

    def newest_committed(self) -> int | None:
        on_disk = newest_checkpoint_on_disk(self.checkpoints)
        known = [s for s in (on_disk, self._committed) if s is not None]
        return max(known) if known else None

    # ---- the ways out ----

    def fail(self, error: BaseException) -> NoReturn:
        """Ends this process of a multi-process run on `error` (it cannot rejoin the others):
        a fatal error another process published, a lost peer, a `UserError` (exit 2, the same
        line on every process), an interrupt, or anything else (its traceback, status 1)."""
        if isinstance(error, SystemExit):
            raise error
        published = self.peers.published() if self.peers is not None else None
        if published is not None and published.origin != self.process:
            self._exit(published.line, published.code, "a fatal error on another process",
                       publish=False, name_details=False)
        if isinstance(error, UserError):
            self._exit(f"error: {_first_line(error)}", EXIT_USAGE, _traceback(error),
                       name_details=False)
        if isinstance(error, KeyboardInterrupt):
            self._exit(f"error: interrupted on process {self.process}{self._where()}; "
                       f"{self._resume_advice()}", EXIT_INTERRUPTED, _traceback(error))
        lost = self._lost_peers(wait=collective_failure(error) or published is not None)
        if lost is not None or collective_failure(error):
            self._exit(self._lost_line(lost, f"a collective failed: {_first_line(error)[:160]}"),
                       EXIT_PEER_LOST, _traceback(error))
        sys.stderr.write(_traceback(error))
        self._exit(f"error: process {self.process} stopped on an unexpected error "
                   f"({type(error).__name__}: {_first_line(error)[:200]}){self._where()}; "
                   f"{self._resume_advice()}", EXIT_ERROR, _traceback(error))

    def write_failed(self, line: str) -> NoReturn:
        """A checkpoint write failed in a background thread (with several processes the
        others would wait for it in orbax's barriers): ends every process with `line`."""
        self._exit(f"error: {line}", EXIT_USAGE, "a checkpoint write failed in the background",
                   name_details=False)

    def _hung(self, late: Overdue) -> None:
        silent = self.peers.silent(min(late.waited, SILENT_SECONDS)) if self.peers else {}
        peers = "".join(f"; process {i} has not answered for {s:.0f} s"
                        for i, s in sorted(silent.items()))
        median = (f"max({self.watchdog.bounds.factor:g} x median iteration "
                  f"{late.median:.3g} s, {self.watchdog.bounds.seconds:g} s)")
        self._exit(f"error: hung: {late.phase} has run {late.waited:.0f} s, past the "
                   f"watchdog's bound of {late.bound:.0f} s ({median}, faults.watchdog){peers};"
                   f" newest committed checkpoint: {self._newest_text()}; stop any hung "
                   f"process, then {self._resume_advice(newest=False)}", EXIT_HUNG,
                   f"phase {late.phase!r} ran {late.waited:.1f} s; bound {late.bound:.1f} s "
                   f"= {median}")

    def _peer_fatal(self, fatal: Fatal) -> None:
        self._exit(fatal.line, fatal.code, f"the fatal error of process {fatal.origin}",
                   publish=False, name_details=False)

    # ---- the lines ----

    def _where(self) -> str:
        step = record().step
        return f" at iteration {step}" if step is not None else " during setup"

    def _newest_text(self) -> str:
        newest = self.newest_committed()
        return str(newest) if newest is not None else "none"

    def _resume_advice(self, newest: bool = True) -> str:
        text = "rerun the same command on every host to resume"
        return (f"newest committed checkpoint: {self._newest_text()}; {text}" if newest
                else text)

    def _lost_peers(self, wait: bool) -> list[int] | None:
        """The processes whose heartbeat counters stood still for `SILENT_SECONDS` (waiting
        up to twice that for them to show, when `wait`), or None if none did."""
        if self.peers is None:
            return None
        deadline = time.monotonic() + (2.5 * SILENT_SECONDS if wait else 0.0)
        while True:
            silent = self.peers.silent(SILENT_SECONDS)
            if silent:
                return sorted(silent)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _lost_line(self, lost: list[int] | None, how: str) -> str:
        if lost is None:
            who = "a process (which one is not known)"
        elif lost == [0]:
            who = "the coordinator (process 0)"
        else:
            who = "process" + ("es " if len(lost) > 1 else " ") + ", ".join(map(str, lost))
        return (f"error: lost {who} of {self.count}{self._where()} ({how}); "
                f"{self._resume_advice()}")

    # ---- the exit ----

    def _exit(self, line: str, code: int, detail: str, *, publish: bool = True,
              name_details: bool = True) -> NoReturn:
        """Writes the details (and every thread's stack), publishes the fatal error to the
        other processes (the first published wins), prints one line, lets the others read it
        and ends the process."""
        if not _EXITING.acquire(blocking=False):
            while True:  # another thread is ending the process
                time.sleep(1)
        self.watchdog.stop()
        if publish and self.peers is not None:
            with contextlib.suppress(Exception):
                winner = self.peers.publish(Fatal(self.process, code, line))
                if winner.origin != self.process:
                    line, code, name_details = winner.line, winner.code, False
        path = self._write_details(line, detail)
        if name_details and path:
            line = f"{line} (details: {path})"
        self._write_event(line, code, path)
        _write_terminal(line + "\n")
        record().write(code=code, printed=1)
        if self.peers is not None:
            with contextlib.suppress(Exception):
                self.peers.ack()
                if self.process == 0:  # the coordinator: the others read the fatal first
                    self.peers.wait_for_acks(ACK_SECONDS, set(self.peers.silent(SILENT_SECONDS)))
        os._exit(code)

    def _write_event(self, line: str, code: int, path: str) -> None:
        """A `lost_peer` or `hung` event in events.jsonl (process 0, a local workdir), so that
        `diagnose` says it too."""
        rule = {EXIT_PEER_LOST: "lost_peer", EXIT_HUNG: "hung"}.get(code)
        if rule is None or self.process != 0 or fs.is_remote(self.workdir):
            return
        message = line.removeprefix("error: ").split("; newest committed checkpoint")[0]
        event = records.event(
            record().step or 0, rule, message,
            "rerun the same command on every host to resume from the newest committed "
            "checkpoint" + ("; the details name the hung phase's stacks" if rule == "hung"
                            else ""),
            newest_committed=self.newest_committed(), details=path, exit_status=code)
        with contextlib.suppress(OSError):
            with open(os.path.join(self.workdir, records.EVENTS_FILE), "a") as f:
                f.write(json.dumps(event) + "\n")

    def _write_details(self, line: str, detail: str) -> str:
        """`WORKDIR/faults/process<I>-<UTC time>.txt`: the line, the detail and every
        thread's stack; its path ("" when it cannot be written)."""
        directory = faults_directory(self.workdir)
        path = os.path.join(directory, f"process{self.process}-{_stamp()}.txt")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(path, "w") as f:
                f.write(f"{line}\n\n{detail.rstrip()}\n\nprocess {self.process} of {self.count}"
                        f", pid {os.getpid()}, phase {self.watchdog.current()!r}, iteration "
                        f"{record().step}, newest committed checkpoint {self._committed}\n\n"
                        "Every thread's stack (most recent call first):\n")
                f.flush()
                faulthandler.dump_traceback(f, all_threads=True)
        except OSError:
            return ""
        return path


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def _write_terminal(text: str) -> None:
    """Writes to stderr without taking Python's stream lock (a stuck main thread may hold
    it)."""
    data = text.encode(errors="replace")
    try:
        fileno = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(fileno, data)
