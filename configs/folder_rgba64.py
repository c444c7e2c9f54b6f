"""WGAN-GP DCGAN on your own folder of 64x64 RGBA sprites (alpha kept as a 4th channel).

Run: `python -m wgan_jax.main --config configs/folder_rgba64.py --workdir runs/sprites
--config.dataset=folder:/path/to/sprites`
Reaches: unmeasured (it depends on your data); it is the recipe for a folder of images.

PNG/JPEG files (class subfolders allowed, ignored) are converted once into an array_record
dataset under the data dir; grey/RGB files get an opaque alpha channel.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "folder:./sprites"
    c.image_size = 64
    c.num_channels = 4
    c.skip_corrupt_images = False
    c.num_iterations = 20_000
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
    c.plot_every = 2000
    c.checkpoint_every = 2000
    return c
