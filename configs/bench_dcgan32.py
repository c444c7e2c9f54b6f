"""Speed benchmark: the WGAN-GP reference CIFAR DCGAN with DIM=32, z of 128, batch 32.

Run: `python benchmarks/train_step.py --config configs/bench_dcgan32.py --iters 20`
(training, CIFAR-10 prepared in DIR: `python -m wgan_jax.main --config configs/bench_dcgan32.py
--workdir runs/dc32 --config.data_dir=DIR`).
Reaches: 0.164 s per generator iteration on the 2-core CPU, 1.52x faster than PyTorch eager,
14.68 GFLOP per iteration (`benchmarks/speed_table.py`; benchmarks/README.md, "Speed";
the GFLOP checked by `tests/test_bench_configs.py`).

G = Dense to 4x4x4DIM + BN + ReLU, 4x4 stride-2 transposed convs to 2DIM and DIM (BN + ReLU),
then to 3 channels with tanh; D = 4x4 stride-2 convs 3 -> DIM -> 2DIM -> 4DIM with
LeakyReLU(0.2), then Dense to 1. n_critic 5, lambda 10, Adam 1e-4 (0.5, 0.9).
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "tfds:cifar10"
    c.image_size = 32
    c.num_channels = 3
    c.global_batch_size = 32
    c.n_critic = 5
    c.penalty_weight = 10.0
    c.model.kind = "dcgan"
    c.model.width = 32
    c.model.z_dim = 128
    c.model.generator_norm = "batch"
    return c
