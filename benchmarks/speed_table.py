"""Ours vs PyTorch eager, interleaved: the table in benchmarks/README.md.

    python benchmarks/speed_table.py [--rounds 3] [--iters 20] [--threads 2]

Runs `train_step.py` and `torch_reference.py` one after the other, in fresh processes, for each
model, `--rounds` times, so that a slow spell of a shared machine hits both sides alike. Each
run reports the median seconds per iteration of its `--iters` timed iterations; the table shows
the median over rounds of each side and their ratio (PyTorch time / our time, the issue's
target is >= 1.5), the per-round ratios, and our FLOP/s against the matmul peak.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"toy": "configs/bench_toy.py", "dcgan32": "configs/bench_dcgan32.py"}


def _run(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, *args], cwd=os.path.dirname(HERE), capture_output=True, text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--models", default="toy,dcgan32")
    args = parser.parse_args()
    rows = []
    for model in args.models.split(","):
        ours, theirs, last = [], [], {}
        for r in range(args.rounds):
            last = _run([os.path.join(HERE, "train_step.py"), "--config", MODELS[model],
                         "--iters", str(args.iters), "--json", "--penalty_overhead"])
            ours.append(last)
            theirs.append(_run([os.path.join(HERE, "torch_reference.py"), "--model", model,
                                "--iters", str(args.iters), "--json",
                                "--threads", str(args.threads)]))
            print(f"{model} round {r + 1}: ours {ours[-1]['seconds_per_iteration']:.4f} s, "
                  f"torch {theirs[-1]['seconds_per_iteration']:.4f} s", file=sys.stderr)
        ours_s = statistics.median(o["seconds_per_iteration"] for o in ours)
        torch_s = statistics.median(t["seconds_per_iteration"] for t in theirs)
        per_round = ", ".join(
            f"{t['seconds_per_iteration'] / o['seconds_per_iteration']:.2f}"
            for o, t in zip(ours, theirs, strict=True)
        )
        flops = last["flops_per_iteration"]
        rows.append(
            f"| {model} | {ours_s:.3f} | {torch_s:.3f} | **{torch_s / ours_s:.2f}** | "
            f"{per_round} | {statistics.median(o['penalty_overhead'] for o in ours):.2f}x | "
            f"{statistics.median(o['host_overhead_seconds'] for o in ours) * 1e3:.2f} ms | "
            f"{flops / 1e9:.2f} | {flops / ours_s / 1e9:.0f} of "
            f"{statistics.median(o['matmul_peak_flops_per_second'] for o in ours) / 1e9:.0f} | "
            f"{statistics.median(o['compile_seconds'] for o in ours):.1f} s |"
        )
    print(f"| model | ours s/iteration | PyTorch eager ({args.threads} threads) s/iteration | "
          "ratio torch / ours | ratio per round | penalty overhead | host overhead | "
          "GFLOP/iteration | GFLOP/s achieved of matmul peak | compile |")
    print("|" + " --- |" * 10)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
