"""The default run (`configs/digits.py`: WGAN-GP, the 16 px DCGAN, 1,500 iterations) made
class-conditional (`model.conditional = "projection"`: a projection critic; the generator gets
a label embedding concatenated to z and conditional BatchNorm), with an evaluation every 500
iterations. Training is exactly `python -m wgan_jax.main --config.model.conditional=projection`.

Run: `python -m wgan_jax.main --config configs/digits_conditional_dcgan.py --workdir runs/cdc`
Reaches: 96.9 +- 0.5% label accuracy after 1,500 iterations, 3 seeds
(`python benchmarks/quality.py --configs digits_conditional_dcgan`; benchmarks/README.md,
"Class-conditional digits"); 45-51% before the generator's label embedding
(docs/techniques.md, "Class-conditional GANs").
"""

import ml_collections

from wgan_jax.default_config import get_config as default_config


def get_config() -> ml_collections.ConfigDict:
    """The default digits run, conditional, evaluated every 500 iterations."""
    c = default_config()
    c.model.conditional = "projection"
    c.eval_every = 500
    c.eval.num_samples = 2500
    return c
