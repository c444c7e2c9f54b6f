"""WGAN-GP DCGAN on scikit-learn's shipped digits at 16x16: the embedded default config."""

from wgan_jax.default_config import get_config  # noqa: F401
