"""Class-conditional WGAN-GP on the digits at their own 8 px: `model.conditional="projection"`
with the MLP networks (a projection critic, a label embedding concatenated to the generator's
latent), evaluated with the label accuracy and per-class FID.

Run: `python -m wgan_jax.main --config configs/digits_conditional.py --workdir runs/cond`
Reaches: 99.0 +- 0.1% of generated digits classified as their label (real held-out digits:
98.7%), per-class FID 2.92 mean, 4.38 worst, after its 1,500 iterations, 3 seeds
(`python benchmarks/quality.py --configs digits_conditional`; benchmarks/README.md,
"Class-conditional digits").

The 16 px DCGAN of `configs/digits.py` made conditional reaches 96.9% in the same 1,500
iterations (`configs/digits_conditional_dcgan.py`); this small MLP at 8 px is far faster.
"""

import ml_collections

from wgan_jax.default_config import get_config as default_config


def get_config() -> ml_collections.ConfigDict:
    """The default digits run, made conditional, at 8 px with MLPs, EMA and eval every 500."""
    c = default_config()
    c.image_size = 8
    c.model.conditional = "projection"
    c.model.kind = "mlp"
    c.model.width = 128
    c.model.depth = 2
    c.model.z_dim = 16
    c.model.generator_norm = "none"
    c.n_critic = 2
    c.generator_lr = 1e-3
    c.critic_lr = 1e-3
    c.ema_decay = 0.999
    c.num_iterations = 1500
    c.eval_every = 500
    c.eval.num_samples = 2500
    c.plot_every = 500
    return c
