"""Small-data `digits` with and without DiffAugment: prints a Markdown table.

    python benchmarks/small_data.py [--sizes 100,300,1500] [--num_iterations 1500]
        [--rows rows.jsonl] [--root /tmp/wgan_small_data]
    python benchmarks/small_data.py --table_from rows.jsonl   # reprint the table

Trains `configs/digits.py` (WGAN-GP DCGAN, 16x16 grey digits) on the first N digits of the
fixed `dataset_size` permutation, for each N, without and with
`augment = "translation,cutout,color"`, the same number of iterations for every run, one run at
a time, each in its own workdir. Scores the last checkpoint as `quality.py` scores digits
("FID vs held-out", `common.heldout_metrics`): 1,500 samples against the 297 digits no N <=
1,500 trains on, on the digit classifier's hidden features; the floor is the 1,500-digit
training pool against them. "Change" is the FID with DiffAugment relative to the same N
without it.
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
COLUMNS = ["Training digits", "DiffAugment", "Iterations", "FID vs held-out", "Change", "Coverage",
           "Train wall (s)", "Train CPU (s)", "Load"]


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
    workdir = os.path.join(args.root, f"digits{size}{'_diffaugment' if augment else ''}")
    timing = train_timed(config, workdir)
    config, gan, state, step = load_run(workdir, "latest")
    row = {"row": os.path.basename(workdir), "config": "digits", "overrides": overrides,
           "dataset_size": size, "augment": augment, "step": step, "workdir": workdir,
           **timing, **heldout_metrics(config, gan, state, seed=0)}
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict]) -> str:
    """The Markdown table: one line per run, DiffAugment's FID change against the same size."""
    fid = {(r["dataset_size"], bool(r["augment"])): r["heldout/fid_digits"] for r in rows}

    def cells(r: dict) -> list[str]:
        plain = fid.get((r["dataset_size"], False))
        change = (f"{100 * (r['heldout/fid_digits'] / plain - 1):+.0f}%"
                  if r["augment"] and plain else "-")
        return [str(r["dataset_size"]), "yes" if r["augment"] else "no", str(r["step"]),
                f"{r['heldout/fid_digits']:.2f}", change, f"{r['heldout/coverage_digits']:.3f}"]

    return markdown_table(rows, COLUMNS, cells, "floor: the 1,500 real training-pool digits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1500", help="comma-separated dataset_size")
    parser.add_argument("--diffaugment", choices=("both", "no", "yes"), default="both",
                        help="which runs of each size (two invocations can run side by side)")
    add_row_arguments(parser, "/tmp/wgan_small_data",
                      "only print the table of the rows in this JSONL (no training)")
    args = parser.parse_args()

    if args.table_from:
        rows = read_rows(args.table_from)
    else:
        from wgan_jax.cli import setup_logging

        setup_logging(True)
        rows = []
        variants = {"both": ("", AUGMENT), "no": ("",), "yes": (AUGMENT,)}[args.diffaugment]
        for size in (int(s) for s in args.sizes.split(",")):
            for augment in variants:
                rows.append(run_row(size, augment, args))
                append_row(args.rows, rows[-1])
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
