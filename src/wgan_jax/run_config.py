"""A run's `config.json`: read as a plain dict, or over today's config schema, without JAX.

The trainer writes the file; `runs` rebuilds a run from it and `diagnose` reads it (which needs
neither JAX nor Flax).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import ml_collections

from wgan_jax import fs
from wgan_jax.config import get_config_schema
from wgan_jax.errors import UserError

__all__ = ["load_config_json", "read_config_dict", "CONFIG_FILE"]

log = logging.getLogger("wgan_jax")

#: The run's config in its workdir, written by the trainer.
CONFIG_FILE = "config.json"
# config.json's list of the networks the trainer was given as objects, not by the config
OBJECTS_KEY = "networks_passed_as_objects"


def read_config_dict(workdir: str) -> dict[str, Any] | None:
    """The JSON object in `workdir`'s config.json, None when there is no such file.

    Raises `UserError` when the file cannot be read or does not hold a JSON object.
    """
    path = fs.join(workdir, CONFIG_FILE)
    try:
        saved = json.loads(fs.read_text(path))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} cannot be read: {error}") from None
    if not isinstance(saved, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return saved


def load_config_json(workdir: str) -> ml_collections.ConfigDict:
    """The config a run in `workdir` was trained with, over today's schema.

    Keys this version does not know (e.g. from a newer or older version) are left out with a
    warning that names them; keys the file lacks keep today's defaults.
    """
    saved = read_config_dict(workdir)
    if saved is None:
        path = fs.join(workdir, CONFIG_FILE)
        raise UserError(f"{path} not found: is {workdir!r} a wgan_jax workdir?")
    config = get_config_schema()
    saved = {k: v for k, v in saved.items() if k != OBJECTS_KEY}
    unknown = _update(config, saved, "", fs.join(workdir, CONFIG_FILE))
    if unknown:
        log.warning("%s: ignoring keys this version does not know: %s",
                    fs.join(workdir, CONFIG_FILE), ", ".join(unknown))
    return config


def _update(
    config: ml_collections.ConfigDict, values: dict[str, Any], prefix: str, path: str
) -> list[str]:
    """Copies `values` into `config` (converting to the schema's types); returns unknown keys."""
    unknown = []
    for key, value in values.items():
        if key not in config:
            unknown.append(prefix + key)
        elif isinstance(config[key], ml_collections.ConfigDict):
            if not isinstance(value, dict):
                raise UserError(f"{path}: {prefix}{key} must be an object, got {value!r}")
            unknown += _update(config[key], value, f"{prefix}{key}.", path)
        elif config[key] is None:
            config[key] = value
        else:
            try:
                config[key] = type(config[key])(value)
            except (TypeError, ValueError):
                raise UserError(f"{path}: {prefix}{key} = {value!r} is not a "
                                f"{type(config[key]).__name__}") from None
    return unknown
