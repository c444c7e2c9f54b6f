"""Speed benchmark: the WGAN-GP reference toy nets (3 ReLU layers of 512, z of 2), batch 256.

Run: `python benchmarks/train_step.py --config configs/bench_toy.py --iters 20`
(training: `python -m wgan_jax.main --config configs/bench_toy.py --workdir runs/bench_toy`).
Reaches: 0.093 s per generator iteration on the 2-core CPU, 1.75x faster than PyTorch eager,
16.25 GFLOP per iteration (`benchmarks/speed_table.py`; benchmarks/README.md, "Speed";
the GFLOP checked by `tests/test_bench_configs.py`).
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:8gaussians"
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty_weight = 0.1
    c.model.width = 512
    c.model.depth = 3
    c.model.z_dim = 2
    return c
