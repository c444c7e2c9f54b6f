"""Speed benchmark: the 64x64 RGBA DCGAN of `rgba64_wgangp.py` (width 16, z of 64, batch 64,
n_critic 5, lambda 10, BatchNorm in G only), with diagnostics off: the step is timed, not the
health statistics. The network and hyperparameters are read from that file, so they stay one.

Run: `python benchmarks/train_step.py --config configs/bench_dcgan64.py --iters 20`
(training: `python -m wgan_jax.main --config configs/bench_dcgan64.py --workdir runs/dc64`).
Reaches: 0.795 s per generator iteration on the 2-core CPU, 1.01x PyTorch eager's speed,
48.74 GFLOP per iteration (`benchmarks/speed_table.py`; benchmarks/README.md, "Speed";
the GFLOP checked by `tests/test_bench_configs.py`).
"""

import os
import runpy


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    c = runpy.run_path(os.path.join(here, "rgba64_wgangp.py"))["get_config"]()
    c.diagnostics.level = "off"
    return c
