"""WGAN-GP on the reference code's 25 Gaussians: all 25 modes in a few minutes on 2 CPU cores.

The data is exactly the reference's (100,000 fixed points, 4,000 per mode, / 2.828) and so
are lambda (0.1), n_critic (5), batch (256) and Adam's betas (0.5, 0.9). Changed to finish
on a laptop: nets of width 256 instead of 512, lr 1e-3 decayed linearly to 0 over 1,500
generator iterations instead of 1e-4 for 100,000 (decay sharpens the modes).
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:25gaussians"
    c.num_iterations = 1500
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.model.width = 256
    c.generator_lr = 1e-3
    c.critic_lr = 1e-3
    c.lr_schedule = "linear"
    c.log_every = 100
    c.sample_every = 250
    c.checkpoint_every = 500
    return c
