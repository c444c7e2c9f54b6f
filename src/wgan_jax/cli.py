"""Shared plumbing of the command-line faces: one-line errors with exit status 2, logging."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from absl import flags

from wgan_jax.errors import UserError

EXIT_USAGE = 2


def fail(message: str) -> None:
    """Prints `error: message` on stderr and exits with status 2 (no traceback)."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.splitlines()[0].split())


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing that reports a bad flag or config in one line with status 2."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        cause = error.__cause__ or error.__context__
        fail(first_line(cause) if isinstance(cause, UserError) else first_line(error))
    except (UserError, AttributeError, KeyError, TypeError, ValueError, OSError) as error:
        fail(first_line(error))
    return []


def setup_logging(is_main: bool) -> None:
    """Plain timestamped lines on stderr; other processes only warn."""
    logger = logging.getLogger("wgan_jax")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if is_main else logging.WARNING)
    logger.propagate = False
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("jax").setLevel(logging.WARNING)


def run_guarded(fn: Callable[[], int | None]) -> int:
    """Runs a CLI body, turning `UserError` into one line and exit status 2."""
    try:
        return int(fn() or 0)
    except UserError as error:
        fail(first_line(error))
    return EXIT_USAGE
