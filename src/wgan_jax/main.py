"""`python -m wgan_jax.main --config configs/NAME.py --workdir DIR [--config.key=value ...]`.

A thin face: flags and exit codes here, everything else in `wgan_jax.train`.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import cast

from absl import app, flags

from wgan_jax import cli, supervisor
from wgan_jax.config import validate_faults
from wgan_jax.errors import StoppedDuringSetup

# No default here: `run` names the embedded default file when `--config` is absent, so that
# it goes through the same loading, overrides and validation as a user's file.
_CONFIG = cli.define_config_flag()
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, samples.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0 for multi-host runs (not on TPU pods)."
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (hosts).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")


def _multi_process() -> bool:
    """Whether this run joins other processes (the flags, or a TPU pod's environment)."""
    return bool(_COORDINATOR.value or _NUM_PROCESSES.value
                or os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("CLOUD_TPU_TASK_ID"))


def _check_distributed_flags() -> None:
    if _COORDINATOR.value or _NUM_PROCESSES.value:
        if _COORDINATOR.value is None or _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
            cli.fail("--coordinator_address, --num_processes and --process_id go together")


def _initialize_distributed(peer_timeout_seconds: int) -> None:
    # Not at the top: `main` installs the setup's stop handler (and forks) before JAX loads.
    from wgan_jax import peers

    if _COORDINATOR.value or _NUM_PROCESSES.value:
        peers.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                         peer_timeout_seconds=peer_timeout_seconds)
    elif os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("CLOUD_TPU_TASK_ID"):
        peers.initialize(peer_timeout_seconds=peer_timeout_seconds)


def _process_name() -> str:
    """This process's index before JAX knows it (the flag, or a TPU VM's worker id)."""
    if _PROCESS_ID.value is not None:
        return str(_PROCESS_ID.value)
    return os.environ.get("CLOUD_TPU_TASK_ID") or os.environ.get("TPU_WORKER_ID") or "x"


def _stop_during_setup(signum, frame) -> None:
    del frame
    raise StoppedDuringSetup(signum)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value:
        cli.fail("--workdir is required")
    # Until the trainer installs its own handlers (`train._SetupStop`, then `train._Stop`), a
    # stop signal ends the setup (importing JAX, reading the config) in one line. Not with
    # several processes: there a stop is a collective decision (JAX's preemption service
    # installs its own SIGTERM handler), never one process leaving on its own.
    previous = {} if _multi_process() else {
        sig: signal.signal(sig, _stop_during_setup) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _main()
    except StoppedDuringSetup as stop:
        sys.stderr.write(f"stopped by {stop.signal} during setup, before the first iteration: "
                         "nothing was trained yet (the workdir's checkpoints are as they "
                         "were; run again to start)\n")
        # The trainer has released the lock and closed its files on the way up; skip the
        # interpreter's finalisation, which can crash (SIGSEGV) when the stop interrupted
        # JAX or the data threads mid-setup.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main() -> int:
    cli.setup_logging(True)
    _check_distributed_flags()
    config = _load_config()
    if _multi_process():
        # A parent that outlives the trainer: it says in one line what JAX's C++ runtime
        # cannot (a lost coordinator ends the others at once, without a word of Python).
        status = supervisor.supervise(cast(str, _WORKDIR.value), _process_name(),
                                      _NUM_PROCESSES.value)
        if status is not None:
            return status
    _initialize_distributed(config.faults.peer_timeout_seconds)
    import jax  # (here, like the trainer: after the setup's stop handler, see `main`)

    from wgan_jax.train import train_and_evaluate

    cli.setup_logging(jax.process_index() == 0)
    return cli.run_guarded(  # --workdir was checked in main
        lambda: train_and_evaluate(config, _WORKDIR.value) and 0)  # type: ignore[arg-type, return-value]


def _load_config():
    """The config file's config, its schema checked and its `faults` bounds validated (they
    are needed before the processes connect); else one line and exit status 2."""
    return cli.load_config(_CONFIG, validate_faults)


def run() -> None:
    app.run(main, flags_parser=cli.parse_config_flags)


if __name__ == "__main__":
    run()
