"""Ours vs PyTorch eager, interleaved: the table in benchmarks/README.md.

    python benchmarks/speed_table.py [--rounds 3] [--iters 20] [--threads 2]
        [--models toy,dcgan32,dcgan64,resnet32] [--model_iters resnet32=2:1]

Each round runs, for every model in turn, `train_step.py --config configs/bench_MODEL.py` and
`torch_reference.py --model MODEL`, each in a fresh process (the side that goes first
alternates between rounds), so that a slow spell of a shared machine hits every model and both
sides alike. Each run reports the median seconds per iteration of its `--iters` timed
iterations (`--model_iters MODEL=ITERS[:WARMUP]` sets a model's own, e.g. 2 timed and 1
warm-up for the ResNet, whose iteration takes tens of seconds); the table shows the median
over rounds of each side, their ratio (PyTorch time / our time) with the per-round ratios,
and both sides' achieved GFLOP/s and share of the matmul peak. The FLOP count is the
network's own (`train_step.model_flops`); the PyTorch nets are the same networks
(tests/test_torch_reference.py), so the same count applies to both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("toy", "dcgan32", "dcgan64", "resnet32")


def _run(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, *args], cwd=os.path.dirname(HERE), capture_output=True, text=True,
    )
    if out.returncode != 0:
        sys.exit(f"error: {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ours(model: str, iters: int, warmup: list[str]) -> list[str]:
    return [os.path.join(HERE, "train_step.py"), "--config", f"configs/bench_{model}.py",
            "--iters", str(iters), "--json", "--penalty_overhead", *warmup]


def _torch(model: str, iters: int, threads: int, warmup: list[str]) -> list[str]:
    return [os.path.join(HERE, "torch_reference.py"), "--model", model, "--iters", str(iters),
            "--json", "--threads", str(threads), *warmup]


def parse_model_iters(text: str) -> dict[str, tuple[int, int | None]]:
    """"resnet32=2:1,dcgan64=10" -> {"resnet32": (2, 1), "dcgan64": (10, None)}."""
    out = {}
    for item in filter(None, text.split(",")):
        model, _, value = item.partition("=")
        iters, _, warmup = value.partition(":")
        if model not in MODELS or not iters.isdigit() or int(iters) < 1 or (
                warmup and not warmup.isdigit()):
            raise ValueError(f"--model_iters: {item!r} is not MODEL=ITERS[:WARMUP] with MODEL "
                             f"from {', '.join(MODELS)} and ITERS >= 1")
        out[model] = (int(iters), int(warmup) if warmup else None)
    return out


def run_rounds(
    models: list[str], rounds: int, iters: int, threads: int, warmup: int | None = None,
    model_iters: dict[str, tuple[int, int | None]] | None = None,
) -> dict:
    """{model: {"ours": [record per round], "torch": [...]}}, round-robin over models;
    `model_iters` gives a model its own (timed iterations, warm-up)."""
    runs = {m: {"ours": [], "torch": []} for m in models}
    for r in range(rounds):
        for model in models:
            n, wu = (model_iters or {}).get(model, (iters, warmup))
            wu = warmup if wu is None else wu
            w = [] if wu is None else ["--warmup", str(wu)]
            sides = [("ours", _ours(model, n, w)), ("torch", _torch(model, n, threads, w))]
            for side, args in sides if r % 2 == 0 else sides[::-1]:
                runs[model][side].append(_run(args))
            ours, theirs = (runs[model][s][-1]["seconds_per_iteration"] for s in ("ours", "torch"))
            print(f"round {r + 1} {model}: ours {ours:.4f} s, torch {theirs:.4f} s",
                  file=sys.stderr, flush=True)
    return runs


def table(runs: dict, threads: int) -> str:
    """The Markdown table of `run_rounds`'s records."""
    med = statistics.median
    lines = [
        f"| model | ours s/iteration | PyTorch eager ({threads} threads) s/iteration | "
        "ratio torch / ours | ratio per round | GFLOP/iteration | ours GFLOP/s (share of "
        "matmul peak) | PyTorch GFLOP/s (share) | matmul peak GFLOP/s | penalty overhead | "
        "host overhead | compile |",
        "|" + " --- |" * 12,
    ]
    for model, r in runs.items():
        ours_s = med(o["seconds_per_iteration"] for o in r["ours"])
        torch_s = med(t["seconds_per_iteration"] for t in r["torch"])
        per_round = ", ".join(
            f"{t['seconds_per_iteration'] / o['seconds_per_iteration']:.2f}"
            for o, t in zip(r["ours"], r["torch"], strict=True)
        )
        gflop = r["ours"][-1]["flops_per_iteration"] / 1e9
        peak = med(o["matmul_peak_flops_per_second"] for o in r["ours"]) / 1e9
        lines.append(
            f"| {model} | {ours_s:.3f} | {torch_s:.3f} | **{torch_s / ours_s:.2f}** | "
            f"{per_round} | {gflop:.2f} | {gflop / ours_s:.0f} ({gflop / ours_s / peak:.0%}) | "
            f"{gflop / torch_s:.0f} ({gflop / torch_s / peak:.0%}) | {peak:.0f} | "
            f"{med(o['penalty_overhead'] for o in r['ours']):.2f}x | "
            f"{med(o['host_overhead_seconds'] for o in r['ours']) * 1e3:.2f} ms | "
            f"{med(o['compile_seconds'] for o in r['ours']):.1f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed iterations per run (default: each script's own, 3 / 2)")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--model_iters", default="",
                        help="per-model timed iterations and warm-up, MODEL=ITERS[:WARMUP],...")
    parser.add_argument("--json", help="also write every run's records to this file")
    args = parser.parse_args()
    try:
        model_iters = parse_model_iters(args.model_iters)
    except ValueError as e:
        parser.error(str(e))
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if args.rounds < 1 or args.iters < 1 or (args.warmup or 0) < 0:
        parser.error("--rounds and --iters must be >= 1, --warmup >= 0")
    runs = run_rounds(models, args.rounds, args.iters, args.threads, args.warmup, model_iters)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f)
    print(table(runs, args.threads))


if __name__ == "__main__":
    main()
