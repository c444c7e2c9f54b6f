"""`python -m wgan_jax.main --config configs/NAME.py --workdir DIR [--config.key=value ...]`.

A thin face: flags and exit codes here, everything else in `wgan_jax.train`.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from wgan_jax import cli, default_config

# No default here: `run` names the embedded default file when `--config` is absent, so that
# it goes through the same loading, overrides and validation as a user's file.
_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Config file (configs/NAME.py); default: the embedded default. Override keys with "
    "--config.key=value.",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, samples.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0 for multi-host runs (not on TPU pods)."
)
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (hosts).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")


def _initialize_distributed() -> None:
    import jax

    if _COORDINATOR.value or _NUM_PROCESSES.value:
        if _COORDINATOR.value is None or _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
            cli.fail("--coordinator_address, --num_processes and --process_id go together")
        jax.distributed.initialize(
            coordinator_address=_COORDINATOR.value,
            num_processes=_NUM_PROCESSES.value,
            process_id=_PROCESS_ID.value,
        )
    elif os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("CLOUD_TPU_TASK_ID"):
        jax.distributed.initialize()


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value:
        cli.fail("--workdir is required")
    cli.setup_logging(True)
    _initialize_distributed()
    import jax

    from wgan_jax.train import train_and_evaluate

    cli.setup_logging(jax.process_index() == 0)
    try:
        config = _CONFIG.value
        config.get("seed")  # a config file that failed to load raises here
    except (flags.Error, OSError, AttributeError, KeyError, TypeError, ValueError) as error:
        path = flags.FLAGS["config"].config_filename
        reason = [line.strip() for line in str(error).splitlines() if line.strip()][-1]
        cli.fail(f"cannot load config file {path}: {reason}")
    return cli.run_guarded(lambda: train_and_evaluate(config, _WORKDIR.value) and 0)


def run() -> None:
    app.run(
        main,
        flags_parser=lambda argv: cli.parse_flags(
            cli.with_config_file(argv, default_config.__file__)
        ),
    )


if __name__ == "__main__":
    sys.exit(run())
