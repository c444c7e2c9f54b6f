"""Small-data `digits` with and without DiffAugment: prints a Markdown table.

    python benchmarks/small_data.py [--sizes 100,300,1500] [--num_iterations 1500]
        [--policy translation,cutout,color] [--continue_from 10000]
        [--rows rows.jsonl] [--root /tmp/wgan_small_data]
    python benchmarks/small_data.py --table_from rows.jsonl   # reprint the table

Trains `configs/digits.py` (WGAN-GP DCGAN, 16x16 grey digits) on the first N digits of the
fixed `dataset_size` permutation, for each N, without and with
`augment = POLICY` (`--policy`, default "translation,cutout,color"), the same number of
iterations for every run, one run at a time, each in its own workdir. Scores the last
checkpoint as `quality.py` scores digits ("FID vs held-out", `common.heldout_metrics`): 1,500
samples against the 297 digits no N <= 1,500 trains on, on the digit classifier's hidden
features. "Change" is the FID with DiffAugment relative to the run of the same N and length
without it. "Memorised" is the FID of a generator that reproduces its N training digits
exactly (the N digits tiled to 1,500 samples) against the same held-out digits: a GAN that
only memorises cannot go below it, so it bounds what augmentation can show at that N.
"""

from __future__ import annotations

import argparse
import json
import os

from common import (
    add_row_arguments,
    append_row,
    apply_overrides,
    heldout_metrics,
    load_config,
    markdown_table,
    read_rows,
    train_timed,
)

AUGMENT = "translation,cutout,color"
COLUMNS = ["Training digits", "DiffAugment", "Iterations", "FID vs held-out", "Change",
           "Memorised", "Coverage", "Train wall (s)", "Train CPU (s)", "Load"]


def run_row(size: int, augment: str, args: argparse.Namespace) -> dict:
    """Trains `digits` on `size` digits (DiffAugment policy `augment`, "" off) and scores it."""
    from wgan_jax.runs import load_run

    config = load_config("digits")
    overrides = {"dataset_size": size, "augment": augment}
    if args.num_iterations:
        overrides["num_iterations"] = args.num_iterations
    if args.image_size:
        overrides["image_size"] = args.image_size
    apply_overrides(config, overrides)
    policy = "_" + augment.replace(",", "_") if augment else ""
    name = f"digits{size}_{config.num_iterations}{policy}"
    workdir = os.path.join(args.root, name)
    shorter = (os.path.join(args.root, f"digits{size}_{args.continue_from}{policy}")
               if args.continue_from else "")
    timing = train_timed(config, workdir, shorter)
    config, gan, state, step = load_run(workdir, "latest")
    row = {"row": name, "config": "digits", "overrides": overrides,
           "continued_from": args.continue_from,
           "dataset_size": size, "augment": augment, "step": step, "workdir": workdir,
           **timing, **heldout_metrics(config, gan, state, seed=0, memorised=True)}
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict]) -> str:
    """The Markdown table: one line per run, DiffAugment's FID change against the run of the
    same size and length without it."""
    fid = {(r["dataset_size"], r["step"]): r["heldout/fid_digits"] for r in rows
           if not r["augment"]}

    def cells(r: dict) -> list[str]:
        plain = fid.get((r["dataset_size"], r["step"]))
        change = (f"{100 * (r['heldout/fid_digits'] / plain - 1):+.0f}%"
                  if r["augment"] and plain else "-")
        memorised = r.get("memorised/fid_digits")
        return [str(r["dataset_size"]), r["augment"] or "no", str(r["step"]),
                f"{r['heldout/fid_digits']:.2f}", change,
                f"{memorised:.2f}" if memorised is not None else "-",
                f"{r['heldout/coverage_digits']:.3f}"]

    return markdown_table(rows, COLUMNS, cells, "floor: the 1,500 real training-pool digits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1500", help="comma-separated dataset_size")
    parser.add_argument("--diffaugment", choices=("both", "no", "yes"), default="both",
                        help="which runs of each size (two invocations can run side by side)")
    parser.add_argument("--policy", default=AUGMENT, help="the DiffAugment policy of the "
                        "augmented runs")
    parser.add_argument("--continue_from", type=int, default=0,
                        help="continue each run from the same run of this many iterations "
                        "under --root (a copy of its workdir; times are the continuation's)")
    add_row_arguments(parser, "/tmp/wgan_small_data",
                      "only print the table of the rows in this JSONL (no training)")
    args = parser.parse_args()

    if args.table_from:
        rows = read_rows(args.table_from)
    else:
        from wgan_jax.cli import setup_logging

        setup_logging(True)
        rows = []
        variants = {"both": ("", args.policy), "no": ("",),
                    "yes": (args.policy,)}[args.diffaugment]
        for size in (int(s) for s in args.sizes.split(",")):
            for augment in variants:
                rows.append(run_row(size, augment, args))
                append_row(args.rows, rows[-1])
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
