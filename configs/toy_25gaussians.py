"""WGAN-GP on the reference code's 25 Gaussians, made to finish in a few minutes on 2 CPU cores.

Run: `python -m wgan_jax.main --config configs/toy_25gaussians.py --workdir runs/25g`
Reaches: no benchmark table records this config (unmeasured). Tests use it as the small real
run (`tests/test_cli.py`, `tests/test_resume.py`, `tests/test_multihost.py`); a 500-iteration
run of the same data with 128-wide nets covers at least 12 of the 25 modes (measured 15;
`tests/test_toy_learns.py`).

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
