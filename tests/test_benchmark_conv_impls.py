"""benchmarks/conv_impls.py runs and prints one table row per case, one column per impl."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_conv_impls_prints_the_layer_table():
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "conv_impls.py"), "--calls", "1",
         "--impls", "matmul,s2d"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    lines = out.strip().splitlines()
    assert lines[1].startswith("| case | matmul | s2d |")
    rows = [line for line in lines if line.startswith(("| critic", "| generator"))]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) >= 2 and all(c.endswith(" ms") and float(c[:-3]) > 0 for c in cells)
