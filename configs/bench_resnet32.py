"""Speed benchmark: the WGAN-GP paper's CIFAR-10 ResNet of `cifar10_resnet.py` (width 128, z of
128, batch 64, n_critic 5, lambda 10, BatchNorm in G only), with diagnostics off: the step is
timed, not the health statistics. The network and hyperparameters are read from that file, so
they stay one.

Run: `python benchmarks/train_step.py --config configs/bench_resnet32.py --iters 2 --warmup 1`
(training, CIFAR-10 prepared in DIR: `python -m wgan_jax.main --config configs/bench_resnet32.py
--workdir runs/rn32 --config.data_dir=DIR`).
Reaches: 19.7 s per generator iteration on the 2-core CPU, 0.99x PyTorch eager's speed,
2058.54 GFLOP per iteration (`benchmarks/speed_table.py`; benchmarks/README.md, "Speed";
the GFLOP checked by `tests/test_bench_configs.py`).
"""

import os
import runpy


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    c = runpy.run_path(os.path.join(here, "cifar10_resnet.py"))["get_config"]()
    c.diagnostics.level = "off"
    return c
