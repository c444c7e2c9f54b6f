"""WGAN-GP on the reference code's 8 Gaussians (gan_toy.py settings: 3 ReLU layers of 512, z of 2,
lambda 0.1, n_critic 5, batch 256, Adam 1e-4 (0.5, 0.9)), evaluated every 1000 iterations.

Run: `python -m wgan_jax.main --config configs/toy_8gaussians.py --workdir runs/8g`
Reaches: unmeasured (no benchmark table records this config); it is the reference setting
to compare against gan_toy.py. `benchmarks/gpu_table.py crosscheck` resumes its checkpoints
across platforms (`tests/test_benchmark_gpu_table.py`).
"""

from wgan_jax.config import get_config_schema


def get_config():
    c = get_config_schema()
    c.dataset = "toy:8gaussians"
    c.num_iterations = 3000
    c.global_batch_size = 256
    c.n_critic = 5
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.model.z_dim = 2
    c.model.width = 512
    c.model.depth = 3
    c.log_every = 100
    c.sample_every = 500
    c.eval_every = 1000
    c.eval.num_samples = 2500
    return c
