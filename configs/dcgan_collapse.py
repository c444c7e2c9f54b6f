"""The classic failure, reproduced offline: a DCGAN whose discriminator overpowers it.

Run: `python -m wgan_jax.main --config configs/dcgan_collapse.py --workdir runs/collapse`,
then `python -m wgan_jax.diagnose --workdir runs/collapse`.
Reaches: the failure, flagged. Its 400-iteration logs ship as `examples/collapse_run`, whose
diagnose report (5 problems, exit 1) docs/diagnostics.md shows (`tests/test_diagnose.py`); on
500 sprites for 300 iterations FID 101.7 and coverage 0 against held-out sprites
(`benchmarks/remedies.py`; benchmarks/README.md, "The collapsing RGBA DCGAN, remedy by remedy").

Logistic (non-saturating) loss, BatchNorm and a sigmoid output in the discriminator, no
penalty, 64x64 RGBA digit sprites, and a discriminator learning rate 10x the generator's.
Within a few hundred iterations the discriminator's loss falls towards 0 while the
generator's climbs: `python -m wgan_jax.diagnose --workdir W` says so and what to do.
`configs/rgba64_wgangp.py` trains the same data with WGAN-GP and stays healthy.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "digits"
    c.image_size = 64
    c.num_channels = 4
    c.num_iterations = 400
    c.global_batch_size = 64
    c.n_critic = 1
    c.loss = "logistic"
    c.penalty = "none"
    c.generator_lr = 2e-4
    c.critic_lr = 2e-3
    c.generator_b1 = c.critic_b1 = 0.5
    c.generator_b2 = c.critic_b2 = 0.999
    c.model.kind = "dcgan"
    c.model.z_dim = 64
    c.model.width = 16
    c.model.generator_norm = "batch"
    c.model.critic_norm = "batch"
    c.model.critic_output = "sigmoid"
    c.log_every = 10
    c.sample_every = 100
    c.plot_every = 100
    c.checkpoint_every = 100
    c.diagnostics.level = "full"
    return c
