"""The shipped configs compiled for TPU slices that are not here (libtpu's compiler on this CPU).

    python benchmarks/tpu_compile.py table [--configs default,tpu_cifar10,...]
        [--topologies v4-8,v4-32,...] [--jsonl benchmarks/results/tpu_compile.jsonl]
    python benchmarks/tpu_compile.py impls [--config cifar10_resnet] [--topology v5e:2x2]
    python benchmarks/tpu_compile.py fit [--config cifar10_resnet] [--topology v5e:2x2]

`table` runs `python -m wgan_jax.compile --json` for each config and slice, one at a time
(each in its own process: libtpu starts afresh, the compile time is the command's own), and
prints the docs/tpu-pods.md table: compiles or not (and why), HBM per chip and its share of
the chip, all-reduced bytes over the minimum, FLOPs per chip, the time bound, the compile time
here. A config runs at its own global batch where that splits over the slice's chips, else at
the next multiple of the chip count (the row says so). `impls` compiles one config's step for
each conv impl ("xla", "s2d", "matmul") and prints what the TPU compiler says of each (its
estimated cycles per iteration, HBM, FLOPs and bytes with the loop body once): the figures
`AUTO_IMPLS["tpu"]` is decided on. `fit` finds the largest per-chip batch a chip holds
(`compile_check.largest_batch`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("default", "tpu_cifar10", "cifar10_resnet", "celeba64", "rgba64_wgangp")
TOPOLOGIES = ("v4-8", "v4-32", "v5litepod-16", "v5litepod-256", "v5p-128", "v6e-256")


def config_path(name: str) -> str | None:
    return None if name == "default" else os.path.join(REPO, "configs", f"{name}.py")


def global_batch(name: str, chips: int) -> int:
    """The config's global batch where it splits over `chips`, else the next multiple."""
    from wgan_jax import default_config

    if name == "default":  # the embedded default, what `compile` runs without --config
        batch = int(default_config.get_config().global_batch_size)
    else:
        sys.path.insert(0, REPO)
        from benchmarks.common import load_config

        batch = int(load_config(name).global_batch_size)
    return batch if batch % chips == 0 else -(-batch // chips) * chips


def compile_case(name: str, topology: str, extra: list[str] | None = None) -> dict:
    """One `python -m wgan_jax.compile --json` run: its report, or its refusal."""
    from wgan_jax import targets

    chips = targets.target(topology).chips
    batch = global_batch(name, chips)
    args = [sys.executable, "-m", "wgan_jax.compile", "--topology", topology, "--json",
            f"--config.global_batch_size={batch}", *(extra or [])]
    if config_path(name):
        args[3:3] = ["--config", config_path(name)]
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    row = {"config": name, "topology": topology, "global_batch": batch,
           "wall_seconds": time.perf_counter() - start, "extra": extra or []}
    if result.returncode == 0:
        row["report"] = json.loads(result.stdout.strip().splitlines()[-1])
    else:
        lines = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
        row["error"] = lines[-1] if lines else result.stderr[-500:]
    return row


def table_row(row: dict) -> str:
    name, topology = row["config"], row["topology"]
    if "report" not in row:
        return f"| {name} | {topology} | {row['global_batch']} | no: {row['error'][7:]} |" + \
            " |" * 5
    r = row["report"]
    step = r["programs"][0]
    ar = step["allreduce"]
    gen_compile = sum(p["compile_seconds"] for p in r["programs"][1:])
    hosts = f"{r['hosts']} host{'s' if r['hosts'] > 1 else ''}"
    return (f"| {name} | {r['topology']} ({r['chips']} chips, {hosts}) | "
            f"{r['global_batch']} ({r['per_chip_batch']}/chip) | yes | "
            f"{step['hbm_bytes'] / 2**20:,.0f} MiB ({step['hbm_bytes'] / r['hbm_per_chip']:.1%}) | "
            f"{ar['bytes'] / r['allreduce_minimum']:.3f}x | "
            f"{r['flops_per_chip'] / 1e9:,.1f} | {r['bound']['iteration'] * 1e3:,.2f} "
            f"({max(('compute', 'hbm', 'allreduce'), key=lambda k: r['bound'][k])}) | "
            f"{step['compile_seconds']:.0f} s (+{gen_compile:.0f} s) |")


def table(args: argparse.Namespace) -> None:
    rows = []
    for name in args.configs.split(","):
        for topology in args.topologies.split(","):
            row = compile_case(name, topology)
            rows.append(row)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")
            print(table_row(row), file=sys.stderr, flush=True)
    print("| config | slice | global batch | compiles | HBM per chip (share) | all-reduced / "
          "minimum | GFLOP per chip per iteration | time bound ms (limit) | compile here "
          "(step + generators) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(table_row(row))


def impls(args: argparse.Namespace) -> None:
    print(f"{args.config} on {args.topology}, the train step per conv impl (TPU compiler):")
    print("| conv_impl | estimated cycles per iteration | HBM per chip | compiled GFLOP (loop "
          "once) | GB accessed (loop once) | compile s |")
    print("|---|---|---|---|---|---|")
    for impl in ("xla", "s2d", "matmul"):
        row = compile_case(args.config, args.topology,
                           [f"--config.model.conv_impl={impl}", "--nogenerators"])
        step = row["report"]["programs"][0]
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
        print(f"| {impl} | {step['estimated_cycles']:,} | {step['hbm_bytes'] / 2**20:,.0f} MiB | "
              f"{step['flops'] / 1e9:,.1f} | {step['bytes_accessed'] / 1e9:,.2f} | "
              f"{step['compile_seconds']:.0f} |", flush=True)


def fit(args: argparse.Namespace) -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    from wgan_jax import compile_check, targets

    sys.path.insert(0, REPO)
    from benchmarks.common import load_config

    config = load_config(args.config)
    start = time.perf_counter()
    batch = compile_check.largest_batch(config, targets.target(args.topology))
    print(f"{args.config} on {args.topology}: the largest per-chip batch that fits is about "
          f"{batch} ({time.perf_counter() - start:.0f} s of compiling)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table")
    t.add_argument("--configs", default=",".join(CONFIGS))
    t.add_argument("--topologies", default=",".join(TOPOLOGIES))
    t.add_argument("--jsonl", default=None)
    for name in ("impls", "fit"):
        p = sub.add_parser(name)
        p.add_argument("--config", default="cifar10_resnet")
        p.add_argument("--topology", default="v5e:2x2")
        p.add_argument("--jsonl", default=None)
    args = parser.parse_args()
    {"table": table, "impls": impls, "fit": fit}[args.command](args)


if __name__ == "__main__":
    main()
