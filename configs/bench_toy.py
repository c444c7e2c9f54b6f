"""Speed benchmark: the WGAN-GP reference toy nets (3 ReLU layers of 512, z of 2), batch 256."""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:8gaussians"
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty_weight = 0.1
    c.model.width = 512
    c.model.depth = 3
    c.model.z_dim = 2
    return c
