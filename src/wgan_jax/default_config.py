"""The embedded default config: what `python -m wgan_jax.main` trains without `--config`.

WGAN-GP with a small DCGAN on scikit-learn's shipped 8x8 digits, upscaled to 16x16: it needs
no download and gives clearly recognisable digits on 2 CPU cores in minutes (276 CPU-seconds
for 1,500 generator iterations; digits are recognisable from ~1,000). `configs/digits.py`
is the same config.
"""

import ml_collections

from wgan_jax.config import get_config_schema

__all__ = ["get_config"]


def get_config() -> ml_collections.ConfigDict:
    """The default run: the schema (`config.get_config_schema`) set for digits at 16 px."""
    c = get_config_schema()
    c.dataset = "digits"
    c.image_size = 16
    c.num_channels = 1
    c.num_iterations = 1500
    c.global_batch_size = 64
    c.n_critic = 5
    c.loss = "wasserstein"
    c.penalty = "gp"
    c.penalty_weight = 10.0
    c.generator_lr = 2e-4
    c.critic_lr = 2e-4
    c.generator_b1 = 0.5
    c.generator_b2 = 0.9
    c.critic_b1 = 0.5
    c.critic_b2 = 0.9
    c.model.kind = "dcgan"
    c.model.z_dim = 32
    c.model.width = 32
    c.model.generator_norm = "batch"
    c.model.critic_norm = "none"
    c.model.conv_impl = "auto"
    c.log_every = 100
    c.sample_every = 250
    c.plot_every = 1000
    return c
