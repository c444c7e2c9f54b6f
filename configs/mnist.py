"""WGAN-GP DCGAN on MNIST (the reference `gan_mnist.py` settings: DIM 64, lambda 10, n_critic 5,
Adam 1e-4 (0.5, 0.9)), 28 px resized to 32.

Run: `python -m wgan_jax.main --config configs/mnist.py --workdir runs/mnist --config.data_dir=DIR`
Reaches: unmeasured (MNIST is not on our machines); it is the reference setting.
`tests/test_eval_features.py` checks it refuses evaluation on features it cannot have.

Needs MNIST prepared offline as array_record in the data dir:
`tfds build mnist --data_dir=DIR --file_format=array_record`, then `--config.data_dir=DIR`.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "tfds:mnist"
    c.image_size = 32
    c.num_channels = 1
    c.num_iterations = 20_000
    c.global_batch_size = 64
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 10.0
    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.generator_b1 = 0.5
    c.generator_b2 = 0.9
    c.critic_b1 = 0.5
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
