"""The 5x5 grid of the mode-collapse papers (VEEGAN / PacGAN / GDPP setup), at the true
mixture's limit in under 3 minutes of 2 CPU cores.

Run: `python -m wgan_jax.main --config configs/grid25.py --workdir runs/grid25`
Reaches: 25.0 +- 0.0 modes, 99.1 +- 0.2% high-quality samples (97.4 +- 0.3% without the
Jacobian truncation below), reverse KL 0.0018 +- 0.0009 on 10,000 samples, in 157 +- 2 s of
training on 2 idle CPU cores, 3 seeds (`python benchmarks/quality.py --configs grid25
--num_samples 10000`; benchmarks/README.md, "Mode collapse on 2-D mixtures", and "grid25 at
the true-mixture limit" for how this recipe was found).

25 modes at {-4, -2, 0, 2, 4}^2, std 0.05 (`wgan_jax.data.toy`). The relativistic pairing loss
with R1 + R2 (weight 0.03), one critic update per generator update, batch 1024, Adam (0, 0.99)
with the critic's learning rate twice the generator's, both decayed linearly to 0, and an EMA
of the generator (what gets evaluated). A continuous generator of a Gaussian latent must join
the modes by thin bridges (2-3% of its samples here, whatever the training tried); evaluation
and `sample` drop the 2% of latents where the generator is steepest, which is where the
bridges come from (`config.sampling.jacobian_truncation`, `wgan_jax.jacobian_truncation`).
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:grid25"
    c.num_iterations = 15000
    c.global_batch_size = 1024
    c.n_critic = 1
    c.loss = "rpgan"
    c.penalty = "r1r2"
    c.penalty_weight = 0.03
    c.generator_lr = 2e-3
    c.critic_lr = 4e-3
    c.generator_b1, c.generator_b2 = 0.0, 0.99
    c.critic_b1, c.critic_b2 = 0.0, 0.99
    c.lr_schedule = "linear"
    c.ema_decay = 0.999
    c.model.z_dim = 2
    c.model.width = 128
    c.model.depth = 3
    c.sampling.jacobian_truncation = 0.02
    c.log_every = 500
    c.sample_every = 5000
    c.plot_every = 5000
    c.eval_every = 5000
    c.eval.num_samples = 10000
    return c
