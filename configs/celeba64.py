"""WGAN-GP DCGAN on CelebA at 64x64x3 (centre square crop of the 178x218 faces, then resized).

Run: `python -m wgan_jax.main --config configs/celeba64.py --workdir runs/celeba64
--config.data_dir=DIR`
Reaches: unmeasured (CelebA is not on our machines); it is the recipe for 64 px faces.

Needs CelebA prepared offline as array_record in the data dir:
`tfds build celeb_a --data_dir=DIR --file_format=array_record`, then `--config.data_dir=DIR`.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "tfds:celeb_a"
    c.image_size = 64
    c.num_channels = 3
    c.num_iterations = 50_000
    c.global_batch_size = 64
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 10.0
    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.generator_b1 = 0.0
    c.generator_b2 = 0.9
    c.critic_b1 = 0.0
    c.critic_b2 = 0.9
    c.model.kind = "dcgan"
    c.model.z_dim = 128
    c.model.width = 64
    c.model.generator_norm = "batch"
    c.model.critic_norm = "none"
    c.model.conv_impl = "auto"
    c.log_every = 100
    c.sample_every = 1000
    c.plot_every = 5000
    c.checkpoint_every = 5000
    return c
