"""The processes of a multi-process run, beside JAX's collectives: who is alive, and an error
that ends the whole run.

`initialize` connects the processes (`jax.distributed.initialize`) with JAX's heartbeat
timeout set to `config.faults.peer_timeout_seconds`: a process that stops answering (killed,
frozen, its machine lost) ends the others within that bound.

`PeerLink` uses the key-value store of JAX's coordination service (the one orbax's barriers
use too), from a thread of its own, every `TICK_SECONDS`:
- each process counts up its own key, and remembers when it saw each other's count move, so
  that a process whose collective failed can name the peer that went silent
  (`PeerLink.silent`);
- a process that meets an error that ends the run publishes it once (`PeerLink.publish`: the
  first one published wins); every other process reads it within a tick and ends with the
  same line and exit status, even when its main thread waits in a collective or a barrier
  that will never complete (`wgan_jax.faults.RunGuard`);
- before the coordinator (process 0) exits, it waits a few seconds for the others to say they
  read the error (`ack`, `wait_for_acks`): its exit ends JAX's coordination service, and with
  it every other process.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from wgan_jax.faults import Fatal

__all__ = ["TICK_SECONDS", "PeerLink", "initialize"]

log = logging.getLogger("wgan_jax")

TICK_SECONDS = 0.5
_GENERATION = itertools.count()  # one key prefix per link (runs in one process each get one)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, peer_timeout_seconds: int) -> None:
    """`jax.distributed.initialize` (arguments None: detected, as on a TPU pod) with JAX's
    heartbeat timeout bounded by `peer_timeout_seconds`."""
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               heartbeat_timeout_seconds=int(peer_timeout_seconds))


def _client() -> Any:
    """JAX's coordination-service client (what `jax.experimental.multihost_utils` and orbax's
    barriers use; JAX has no public accessor), or None without `jax.distributed`."""
    from jax._src import distributed

    return distributed.global_state.client


class PeerLink:
    """This process's link to the others through the coordination service's key-value store
    (see the module docstring). `connect()` returns None when there is no such service."""

    def __init__(self, client: Any, process: int, count: int, *,
                 tick: float = TICK_SECONDS) -> None:
        self._client = client
        self.process, self.count = process, count
        self.tick = tick
        self._prefix = f"wgan_jax/faults/{next(_GENERATION)}/"
        now = time.monotonic()
        self._seen: dict[int, tuple[str | None, float]] = {
            i: (None, now) for i in range(count) if i != process}
        self._answered = now  # the last time the store answered (it lives in process 0)
        self._fatal: Fatal | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def connect(cls) -> PeerLink | None:
        client = _client()
        if client is None or jax.process_count() == 1:
            return None
        return cls(client, jax.process_index(), jax.process_count())

    # ---- the thread ----

    def start(self, on_fatal: Callable[[Fatal], Any]) -> None:
        """Starts counting and watching; `on_fatal` is called (from the link's thread) with
        another process's published error."""

        def run() -> None:
            while not self._stop.is_set():
                fatal = self.poll()
                if fatal is not None and fatal.origin != self.process and not self._stop.is_set():
                    on_fatal(fatal)
                    return
                self._stop.wait(self.tick)

        self._thread = threading.Thread(target=run, name="wgan_jax-peers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.tick + 1)
        self._thread = None

    def poll(self) -> Fatal | None:
        """One tick: counts this process up, reads the others' counts and a published error."""
        try:
            self._client.key_value_increment(f"{self._prefix}alive/{self.process}", 1)
            entries = dict(self._client.key_value_dir_get(self._prefix))
        except Exception:  # noqa: BLE001 - the store is unreachable: `silent` reports it
            return self._fatal
        now = time.monotonic()
        self._answered = now
        for i, (value, _) in list(self._seen.items()):
            current = entries.get(f"{self._prefix}alive/{i}")
            if current is not None and current != value:
                self._seen[i] = (current, now)
        text = entries.get(f"{self._prefix}fatal")
        if text is not None and self._fatal is None:
            self._fatal = _parse(text)
        return self._fatal

    # ---- what the guard asks ----

    def silent(self, seconds: float) -> dict[int, float]:
        """`{process: seconds}` of the other processes whose count has not moved for at least
        `seconds`; the coordinator (process 0) when the store itself has not answered for as
        long."""
        now = time.monotonic()
        quiet = {i: now - t for i, (_, t) in self._seen.items() if now - t >= seconds}
        if self.process != 0 and now - self._answered >= seconds:
            quiet[0] = max(quiet.get(0, 0.0), now - self._answered)
        return quiet

    def publish(self, fatal: Fatal) -> Fatal:
        """Publishes `fatal` unless another process's was published first; returns the one
        that stands."""
        try:
            self._client.key_value_set(f"{self._prefix}fatal", _dump(fatal))
            self._fatal = fatal
        except Exception:  # noqa: BLE001 - already set (or the store is gone)
            standing = self.published()
            if standing is not None:
                return standing
        return fatal

    def published(self) -> Fatal | None:
        """The published error, if any (asked of the store; the last one seen if it cannot
        answer)."""
        try:
            self._fatal = _parse(self._client.key_value_try_get(f"{self._prefix}fatal"))
        except Exception:  # noqa: BLE001 - not found, or the store is unreachable
            pass
        return self._fatal

    def ack(self) -> None:
        self._client.key_value_set(f"{self._prefix}exited/{self.process}", "1",
                                   allow_overwrite=True)

    def wait_for_acks(self, seconds: float, skip: set[int]) -> None:
        """Waits up to `seconds` for every other process not in `skip` to `ack`."""
        waiting = {i for i in range(self.count) if i != self.process} - skip
        deadline = time.monotonic() + seconds
        while waiting and time.monotonic() < deadline:
            try:
                done = dict(self._client.key_value_dir_get(f"{self._prefix}exited/"))
            except Exception:  # noqa: BLE001
                return
            waiting -= {i for i in waiting if f"{self._prefix}exited/{i}" in done}
            time.sleep(0.05)


def _dump(fatal: Fatal) -> str:
    return json.dumps({"origin": fatal.origin, "code": fatal.code, "line": fatal.line})


def _parse(text: str) -> Fatal:
    data = json.loads(text)
    return Fatal(int(data["origin"]), int(data["code"]), str(data["line"]))
