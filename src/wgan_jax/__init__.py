"""wgan_jax: exact data-parallel Wasserstein GANs with gradient penalty in JAX/Flax."""

__version__ = "0.1.0"
