"""Errors a user can act on: the CLI prints them as one line and exits with status 2."""

__all__ = ["UserError", "ConfigError", "DataError", "NetworkError", "StoppedDuringSetup"]


class UserError(Exception):
    """A problem with the user's input (config, data, workdir), reported in one line."""


class ConfigError(UserError):
    """A config key is unknown, has the wrong type or an invalid value."""


class DataError(UserError):
    """A dataset cannot be found, read or converted."""


class StoppedDuringSetup(BaseException):
    """SIGTERM/SIGINT arrived before the first training iteration: nothing was trained.

    A `BaseException` (as `KeyboardInterrupt`), so that no `except Exception` on the way up
    swallows it; the trainer's face turns it into one line and exit status 0.
    """

    def __init__(self, signum: int) -> None:
        import signal

        self.signal = signal.Signals(signum).name
        super().__init__(self.signal)


class NetworkError(ConfigError, ValueError):
    """A generator or critic does not fit the data or the contract (checked at the door)."""
