"""WGAN-GP on the 8-mode ring of the mode-collapse papers (VEEGAN / PacGAN / GDPP setup)."""

from wgan_jax.config import get_default_config


def get_config():
    c = get_default_config()
    c.dataset = "toy:ring8"
    c.num_iterations = 3000
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.log_every = 100
    c.sample_every = 1000
    c.eval_every = 1000
    c.eval.num_samples = 2500
    return c
