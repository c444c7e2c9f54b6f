"""WGAN-GP on the 8-mode ring of the mode-collapse papers (VEEGAN / PacGAN / GDPP setup).

Run: `python -m wgan_jax.main --config configs/ring8.py --workdir runs/ring8`
Reaches: 8.0 +- 0.0 modes, 98.1 +- 0.7% high-quality samples, reverse KL 0.002 +- 0.001 in
529 +- 32 s on the 2-core CPU, 3 seeds (`python benchmarks/quality.py --configs ring8`;
benchmarks/README.md, "Mode collapse on 2-D mixtures").

Ring of radius 1, 8 modes, std 0.01 (`wgan_jax.data.toy`). Against the gan_toy.py defaults
(width 512, Adam 1e-4 constant, 3k-100k iterations) this trades width for iterations: a
128-wide MLP pair, 20k iterations of Adam 2e-3 decayed linearly to 0 (the decay is what
sharpens the modes; 1e-3 or 10k iterations left 2-3% of the samples between modes) and an EMA
of the generator weights, which is what gets evaluated.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:ring8"
    c.num_iterations = 20000
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.generator_lr = 2e-3
    c.critic_lr = 2e-3
    c.lr_schedule = "linear"
    c.ema_decay = 0.99
    c.model.z_dim = 2
    c.model.width = 128
    c.model.depth = 3
    c.log_every = 200
    c.sample_every = 2000
    c.plot_every = 2000
    c.eval_every = 2000
    c.eval.num_samples = 2500
    return c
