"""WGAN-GP on the reference code's 25 Gaussians (fixed 100k points), all 25 modes in minutes."""

from wgan_jax.config import get_default_config


def get_config():
    c = get_default_config()
    c.dataset = "toy:25gaussians"
    c.num_iterations = 3000
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.log_every = 100
    c.sample_every = 500
    return c
