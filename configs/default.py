"""The embedded default config (also what runs when --config is omitted)."""

from wgan_jax.default_config import get_config  # noqa: F401
