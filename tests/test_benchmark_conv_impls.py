"""benchmarks/conv_impls.py runs and prints one table row per case, one column per impl, and
the fastest impl (what `conv_impl="auto"` should be on the platform)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))


@pytest.mark.slow
def test_conv_impls_prints_the_layer_table_and_the_fastest(tmp_path):
    out_json = tmp_path / "conv.json"
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "conv_impls.py"), "--calls", "1",
         "--impls", "matmul,s2d", "--batch", "8", "--json", str(out_json)],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    lines = out.strip().splitlines()
    assert "batch 8" in lines[0]
    assert lines[1].startswith("| case | matmul | s2d |")
    rows = [line for line in lines if line.startswith(("| critic", "| generator"))]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) >= 2 and all(c.endswith(" ms") and float(c[:-3]) > 0 for c in cells)
    record = json.loads(out_json.read_text())
    assert record["platform"] == "cpu" and set(record["median_seconds"]) >= {"matmul", "s2d"}
    best = record["fastest"]["iteration"]
    assert best in ("matmul", "s2d")
    assert (f"fastest for one iteration (5 x critic cases + generator): {best} -> "
            f"AUTO_IMPLS['cpu'] = {best!r} (now 'matmul')") in out


def test_fastest_weighs_the_critic_cases_by_n_critic():
    from conv_impls import fastest

    # s2d wins the generator case, but five critic calls per iteration make matmul faster.
    medians = {"matmul": [1.0, 1.0, 3.0], "s2d": [2.0, 1.0, 1.0]}
    best = fastest(medians)
    assert best["critic GP double backward"] == "matmul"
    assert best["generator forward + backward"] == "s2d"
    assert best["iteration"] == "matmul"  # 5 + 5 + 3 = 13 < 10 + 5 + 1 = 16
    assert fastest({"matmul": [1.0, 1.0, 12.0], "s2d": [2.0, 1.0, 1.0]})["iteration"] == "s2d"
