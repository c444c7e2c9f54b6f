"""Errors a user can act on: the CLI prints them as one line and exits with status 2."""


class UserError(Exception):
    """A problem with the user's input (config, data, workdir), reported in one line."""


class ConfigError(UserError):
    """A config key is unknown, has the wrong type or an invalid value."""


class DataError(UserError):
    """A dataset cannot be found, read or converted."""


class NetworkError(ConfigError, ValueError):
    """A generator or critic does not fit the data or the contract (checked at the door)."""
