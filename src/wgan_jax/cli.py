"""Shared plumbing of the command-line faces: one-line errors with exit status 2, logging."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import ml_collections
from absl import flags
from ml_collections import config_flags

from wgan_jax.config import check_schema, unknown_key_message, unknown_override
from wgan_jax.errors import UserError

# The faces' exit statuses, in one place (docs/command-line.md#exit-statuses).
EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error (a bug): its traceback is printed
EXIT_USAGE = 2  # bad input, or a write that failed: one `error:` line; fix it and run again
EXIT_PEER_LOST = 3  # another process of the run was lost: rerun the same command on every host
EXIT_HUNG = 4  # the watchdog: a phase ran far past its bound (faults.watchdog)
EXIT_INTERRUPTED = 130  # a second Ctrl-C, or Ctrl-C in a multi-process run
_T = TypeVar("_T")


def fail(message: str) -> NoReturn:
    """Prints `error: message` on stderr and exits with status 2 (no traceback)."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the faces' convention: a bad flag is one `error:` line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        fail(message)


def check_flag(flag: str, value: Any, parse: Callable[[Any], _T]) -> _T:
    """`parse(value)`; a `ValueError` it raises is one line `error: --flag <its message>` and
    exit status 2."""
    try:
        return parse(value)
    except ValueError as error:
        fail(f"--{flag} {error}")
        raise  # not reached: fail exits


@dataclasses.dataclass(frozen=True)
class RunFlags:
    """The flags that open a trained run's generator, shared by `sample` and `export`:
    `--workdir`, `--checkpoint` (latest, best or a step number) and `--ema`."""

    workdir: flags.FlagHolder
    checkpoint: flags.FlagHolder
    ema: flags.FlagHolder


def define_run_flags() -> RunFlags:
    """Defines `RunFlags`' three flags (once per process: a face calls it at import)."""
    return RunFlags(
        workdir=flags.DEFINE_string("workdir", None, "The run's workdir."),
        checkpoint=flags.DEFINE_string("checkpoint", "latest", "latest, best, or a step number."),
        ema=flags.DEFINE_boolean("ema", False,
                                 "Use the EMA generator weights (if the run kept them)."),
    )


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.splitlines()[0].split())


def with_config_file(argv: list[str], default_path: str) -> list[str]:
    """`argv` with `--config=default_path` added when it names no `--config` file.

    The embedded default is then loaded, overridden and validated exactly like a config file
    given by the user: an unknown `--config.key` or a bad value fails the same way.
    """
    for arg in argv[1:]:
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("-") and name == "config":
            return list(argv)
        if arg == "--":
            break
    return [argv[0], f"--config={default_path}", *argv[1:]]


def define_config_flag() -> flags.FlagHolder:
    """`--config FILE` with `--config.key=value` overrides (once per process: a face that
    takes a run's config, `main` or `compile`, calls it at import; `parse_config_flags`
    names the embedded default when it is absent)."""
    return config_flags.DEFINE_config_file(
        "config", None,
        "Config file (configs/NAME.py); default: the embedded default. Override keys with "
        "--config.key=value.",
        lock_config=True,
    )


def parse_config_flags(argv: list[str]) -> list[str]:
    """`parse_flags` over the config file (the embedded default when none is named): a config
    file that does not run (a syntax error, an exception in `get_config`) is one line naming
    the file and the error, not a traceback."""
    from wgan_jax import default_config

    argv = with_config_file(argv, default_config.__file__)
    try:
        return parse_flags(argv)
    except Exception as error:  # noqa: BLE001 - whatever the user's config file raised
        fail(f"cannot load config file {_config_path(argv)}: {type(error).__name__}: "
             f"{first_line(error)}")
    return []


def _config_path(argv: list[str]) -> str:
    """The `--config` file named in `argv` (without a `:override` suffix)."""
    for i, arg in enumerate(argv[1:], 1):
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name == "config":
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            return value.split(":", 1)[0]
    return "?"


def load_config(holder: flags.FlagHolder,
                validate: Callable[[ml_collections.ConfigDict], Any] | None = None
                ) -> ml_collections.ConfigDict:
    """The `--config` file's config, its schema checked (and `validate`d); else one line and
    exit status 2."""
    path = flags.FLAGS["config"].config_filename  # type: ignore[attr-defined]
    try:
        config = holder.value
        config.get("seed")  # a config file that failed to load raises here
    except (flags.Error, OSError, AttributeError, KeyError, TypeError, ValueError) as error:
        reason = [line.strip() for line in str(error).splitlines() if line.strip()][-1]
        fail(f"cannot load config file {path}: {reason}")
    try:
        check_schema(config, f"config file {path}")
        if validate is not None:
            validate(config)
    except UserError as error:
        fail(first_line(error))
    return config


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports a bad flag or config in one line with status 2."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, UserError, AttributeError, KeyError, TypeError, ValueError,
            OSError) as error:
        fail(_flag_error_line(error, argv))
    return []


def _flag_error_line(error: BaseException, argv: list[str]) -> str:
    """The one line for a parse error: an unknown `--config.KEY` by name, else the cause."""
    unknown = unknown_override(argv)
    if unknown is not None:
        return unknown_key_message(unknown)
    cause = error.__cause__ or error.__context__
    if isinstance(error, flags.Error) and isinstance(cause, UserError):
        return first_line(cause)
    return first_line(error)


def setup_logging(is_main: bool) -> None:
    """Plain timestamped lines on stderr; other processes only warn; libtpu kept from
    starting on a machine with no TPU (`skip_absent_tpu`)."""
    skip_absent_tpu()
    logger = logging.getLogger("wgan_jax")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if is_main else logging.WARNING)
    logger.propagate = False
    absl_logger = logging.getLogger("absl")
    absl_logger.setLevel(logging.WARNING)
    logging.getLogger("jax").setLevel(logging.WARNING)
    # absl's app.run shows every library's INFO records; matplotlib's first use on a machine
    # logs "generated new fontManager" there (its font cache). Its warnings still show.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if not _verbose():
        _quiet_orbax(absl_logger)


_GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin",
                "jax_rocm7_plugin")
_GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips (and some other Google devices) on the PCI bus


def skip_absent_tpu() -> None:
    """Runs JAX on the CPU where that is all it could find anyway (`only_cpu_here`). Otherwise
    JAX starts libtpu, which prints a screen of "could not determine TPU worker hostnames"
    before JAX falls back to the CPU."""
    if not only_cpu_here():
        return
    if "jax" in sys.modules:  # backends start at the first device query, not at import
        sys.modules["jax"].config.update("jax_platforms", "cpu")
    else:
        os.environ["JAX_PLATFORMS"] = "cpu"


def only_cpu_here() -> bool:
    """Whether JAX could only end on the CPU although libtpu is installed (the test extra
    brings it for the TPU compiler): no TPU chip on the PCI bus, no GPU plugin, and neither
    `JAX_PLATFORMS` nor `JAX_FORCE_TPU_INIT` set. Any Google PCI device counts as a TPU."""
    import importlib.util

    if os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_FORCE_TPU_INIT"):
        return False
    if importlib.util.find_spec("libtpu") is None:
        return False
    if any(importlib.util.find_spec(name) for name in _GPU_PLUGINS):
        return False
    for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(path) as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return False
        except OSError:
            return False
    return True


def _verbose() -> bool:
    """Whether absl's `--verbosity`/`-v` flag was given (then orbax's own log is shown)."""
    try:
        return bool(flags.FLAGS["verbosity"].present)
    except (KeyError, flags.Error):
        return False


def _from_orbax(record: logging.LogRecord) -> bool:
    return f"{os.sep}orbax{os.sep}" in record.pathname


def _quiet_orbax(absl_logger: logging.Logger) -> None:
    """Keeps orbax's background chatter off the terminal: its error records (a failed save
    logs a traceback from each of its writer threads), and the tracebacks and warnings that
    its threads leave when a save fails (`Event loop is closed`, coroutines never awaited,
    futures never retrieved);
    a background thread that dies of an `OSError` (a full disk) is one warning line. The
    failure itself reaches the user as our one `error:` line; `--verbosity=0` shows orbax's
    log again."""
    if not any(f is _from_orbax_filter for f in absl_logger.filters):
        absl_logger.addFilter(_from_orbax_filter)
    asyncio_logger = logging.getLogger("asyncio")
    if not any(f is _abandoned_write_filter for f in asyncio_logger.filters):
        asyncio_logger.addFilter(_abandoned_write_filter)
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited",
                            category=RuntimeWarning)
    if not getattr(threading.excepthook, "quiet_orbax", False):
        previous_thread_hook = threading.excepthook

        def thread_excepthook(args: threading.ExceptHookArgs) -> None:
            # A writer thread that meets a full disk (TensorBoard's, orbax's): one line; the
            # main thread reports the failure itself.
            if isinstance(args.exc_value, OSError):
                logging.getLogger("wgan_jax").warning(
                    "background thread %s stopped: %s",
                    getattr(args.thread, "name", "?"), first_line(args.exc_value))
                return
            previous_thread_hook(args)

        thread_excepthook.quiet_orbax = True  # type: ignore[attr-defined]
        threading.excepthook = thread_excepthook
    if not getattr(sys.unraisablehook, "quiet_orbax", False):
        previous = sys.unraisablehook

        def unraisablehook(unraisable: sys.UnraisableHookArgs) -> None:
            # Tensorstore's callbacks of a failed save's writes, after orbax closed its loop.
            value = unraisable.exc_value
            if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
                return
            previous(unraisable)

        unraisablehook.quiet_orbax = True  # type: ignore[attr-defined]
        sys.unraisablehook = unraisablehook


def _abandoned_write_filter(record: logging.LogRecord) -> bool:
    """Drops asyncio's "exception was never retrieved" for a failed write (an `OSError` or a
    TensorStore status such as `RESOURCE_EXHAUSTED: ...`) that orbax's threads abandoned."""
    if "never retrieved" not in str(record.msg) or not record.exc_info:
        return True
    error = record.exc_info[1]
    return not (isinstance(error, OSError) or re.match(r"^[A-Z][A-Z_]+: ", str(error)))


def _from_orbax_filter(record: logging.LogRecord) -> bool:
    """Drops orbax's error records (a failed save logs one, with a traceback, from each of its
    threads) and its notes that a directory opened read-only is read-only (what `sample` and
    `evaluate` ask for); its other warnings, e.g. the preemption sync point, stay."""
    if not _from_orbax(record):
        return True
    if logging.ERROR <= record.levelno < logging.CRITICAL:
        return False
    return not re.search(r"read[ _]only", record.getMessage())


def run_guarded(fn: Callable[[], int | None]) -> int:
    """Runs a CLI body, turning `UserError` into one line and exit status 2."""
    try:
        return int(fn() or 0)
    except UserError as error:
        fail(first_line(error))
    return EXIT_USAGE
