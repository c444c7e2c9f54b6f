"""WGAN-GP DCGAN on stacked digits (three sklearn digits as RGB: 1000 modes), the offline
analogue of Stacked MNIST; trains on CPU. Mode coverage: `wgan_jax.metrics.stacked`."""

from wgan_jax.config import get_default_config


def get_config():
    c = get_default_config()
    c.dataset = "stacked_digits"
    c.image_size = 16
    c.num_channels = 3
    c.num_iterations = 3000
    c.global_batch_size = 64
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 10.0
    c.generator_lr = 2e-4
    c.critic_lr = 2e-4
    c.generator_b1 = 0.5
    c.generator_b2 = 0.9
    c.critic_b1 = 0.5
    c.critic_b2 = 0.9
    c.model.kind = "dcgan"
    c.model.z_dim = 64
    c.model.width = 64
    c.model.generator_norm = "batch"
    c.model.critic_norm = "none"
    c.model.conv_impl = "auto"
    c.log_every = 100
    c.sample_every = 500
    c.plot_every = 1000
    return c
