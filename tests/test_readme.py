"""The README's Python examples run as written (bring-your-own networks included)."""

from __future__ import annotations

import os
import re

from conftest import REPO, run_python


def _python_blocks() -> list[str]:
    with open(os.path.join(REPO, "README.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_pure_function_example_gives_the_closed_form():
    (block,) = [b for b in _python_blocks() if "penalties.gradient_penalty" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert abs(float(namespace["gp"]) - 16.0) < 1e-4


def test_bring_your_own_networks_example_trains(tmp_path):
    (block,) = [b for b in _python_blocks() if "train_and_evaluate(" in b]
    workdir = str(tmp_path / "byo")
    code = block.replace('"/tmp/byo_run"', repr(workdir))
    result = run_python(code, devices=2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.strip().splitlines()[-1]) == float(
        result.stdout.strip().splitlines()[-1]
    )  # a finite number was printed
    assert os.path.exists(os.path.join(workdir, "metrics.jsonl"))
    assert os.listdir(os.path.join(workdir, "checkpoints"))
