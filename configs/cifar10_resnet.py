"""The WGAN-GP paper's CIFAR-10 ResNet (Appendix F): BN in G only, 100k generator iterations,
Adam 2e-4 decayed linearly to 0, beta1 0, beta2 0.9, n_critic 5, batch 64, lambda 10.

Run: `python -m wgan_jax.main --config configs/cifar10_resnet.py --workdir runs/cifar10
--config.data_dir=DIR`
Reaches: quality unmeasured (CIFAR-10 and the Inception weights are not on our machines); its
step's speed is measured as `configs/bench_resnet32.py` (19.7 s per iteration on the 2-core
CPU, at parity with PyTorch eager; benchmarks/README.md, "Speed").

Needs CIFAR-10 prepared offline as array_record in the data dir:
`tfds build cifar10 --data_dir=DIR --file_format=array_record`, then `--config.data_dir=DIR`.
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "tfds:cifar10"
    c.image_size = 32
    c.num_channels = 3
    c.num_iterations = 100_000
    c.global_batch_size = 64
    c.n_critic = 5
    c.loss = "wasserstein"
    c.penalty = "gp"
    c.penalty_weight = 10.0
    c.generator_lr = 2e-4
    c.critic_lr = 2e-4
    c.lr_schedule = "linear"
    c.generator_b1 = 0.0
    c.generator_b2 = 0.9
    c.critic_b1 = 0.0
    c.critic_b2 = 0.9
    c.model.kind = "resnet"
    c.model.z_dim = 128
    c.model.width = 128
    c.model.generator_norm = "batch"
    c.model.critic_norm = "none"
    c.model.conv_impl = "auto"
    c.log_every = 100
    c.sample_every = 1000
    c.plot_every = 5000
    c.checkpoint_every = 5000
    return c
