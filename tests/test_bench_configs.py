"""The speed table's configs build, and their FLOPs per iteration are what benchmarks/README.md
states (torch not needed).

`train_step.model_flops`: XLA's cost analysis of each bench config's step (critic loop
unrolled, every convolution XLA's own, lowered without compiling), the count train_step.py
reports, so a changed network, batch or n_critic fails it until the README says the new
figure.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from conftest import REPO, load_repo_file

MODELS = ("toy", "dcgan32", "dcgan64", "resnet32")


def _readme_gflop() -> dict[str, float]:
    """model -> GFLOP/iteration from the networks table of benchmarks/README.md."""
    with open(os.path.join(REPO, "benchmarks", "README.md")) as f:
        text = f.read()
    rows = re.findall(r"^\| (\w+) \|.*\| ([\d.]+) \|$", text, flags=re.M)
    return {model: float(gflop) for model, gflop in rows if model in MODELS}


@pytest.mark.parametrize("model", MODELS)
def test_bench_config_flops_are_the_readme_figure(model):
    bench = load_repo_file("benchmarks/train_step.py")
    config = load_repo_file(f"configs/bench_{model}.py").get_config()
    flops = bench.model_flops(config)
    np.testing.assert_allclose(flops / 1e9, _readme_gflop()[model], rtol=0.01)
