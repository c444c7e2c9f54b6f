"""The embedded default config: what `python -m wgan_jax.main` trains without `--config`."""

import ml_collections

from wgan_jax.config import get_default_config


def get_config() -> ml_collections.ConfigDict:
    return get_default_config()
