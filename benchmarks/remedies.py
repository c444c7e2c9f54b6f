"""The collapsing RGBA DCGAN and each advised remedy, measured: prints a Markdown table.

    python benchmarks/remedies.py [--rows rows.jsonl] [--root /tmp/wgan_remedies]
        [--num_iterations 100] [--log_every 5] [--dataset_size 500] [--only collapse,spectral,...]
    python benchmarks/remedies.py --table_from rows.jsonl [--rediagnose]
        # reprint the table and the grid (--rediagnose: diagnose the rows' workdirs again with
        # today's health rules)

Every row trains `configs/dcgan_collapse.py` (64x64 RGBA digit sprites, logistic loss,
BatchNorm + sigmoid discriminator, discriminator lr 10x the generator's) or, for the
Wasserstein rows, `configs/rgba64_wgangp.py`, on the same `dataset_size` subset for the same
number of iterations, with the row's overrides (`ROWS`; each is checked in the workdir's
config.json). `log_every` (5) is set for every row: the health rules judge logged rows (a
window of 20), so a 100-iteration run logs as many rows as the 400-iteration
`examples/collapse_run`. One row at a time, each in its own workdir under --root. Per row:

* diagnose: `wgan_jax.diagnose.diagnose(workdir)`'s verdict and the rules that fired;
* FID vs held-out: 1,500 samples of the evaluated checkpoint (the last one; the best one by
  FID for the early-stopping row) against the 297 sprites no row trains on (`common.heldout_split`),
  on the hidden features of the 8x8 digit classifier applied to the alpha (ink) channel, the
  feature space `eval.features = "auto"` gives RGBA digits (the class colour is not judged);
  the floor is the 1,500-sprite training pool against the same held-out sprites;
* coverage (Naeem et al. 2020, k = 5): the share of held-out sprites whose 5-nearest-neighbour
  ball in that feature space holds at least one generated sample; a collapsed generator covers
  few, so it is the diversity column (1 is full coverage);
* training wall time and process CPU time (all threads), and the 1-minute load average;
* a strip of 10 samples (same latent seed for every row), assembled into one comparison PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from common import (
    add_row_arguments,
    append_row,
    apply_overrides,
    diagnosis,
    heldout_metrics,
    load_config,
    markdown_table,
    read_rows,
    sample_strip,
    save_comparison,
    train_timed,
    verdict,
)

AUGMENT = "translation,cutout,color"
INSTANCE_NOISE = 0.5  # initial std on [-1, 1] images, annealed linearly to 0
# FID-based early stopping: evaluate every 25 iterations on 500 samples against the training
# sprites (the trainer's own reference), stop after 3 evaluations without a better FID, and
# score the best checkpoint by that FID.
EARLY_STOPPING = {"eval_every": 25, "eval.num_samples": 500, "early_stopping.patience": 3}

# (row name, base config, overrides, checkpoint evaluated)
ROWS = (
    ("collapse", "dcgan_collapse", {}, "latest"),
    ("wgan_gp", "rgba64_wgangp", {}, "latest"),
    ("spectral", "dcgan_collapse", {"model.critic_norm": "spectral"}, "latest"),
    ("instance_noise", "dcgan_collapse", {"instance_noise": INSTANCE_NOISE}, "latest"),
    ("diffaugment", "dcgan_collapse", {"augment": AUGMENT}, "latest"),
    ("early_stopping", "dcgan_collapse", EARLY_STOPPING, "best"),
    ("combined", "dcgan_collapse", {"model.critic_norm": "spectral",
                                    "instance_noise": INSTANCE_NOISE, "augment": AUGMENT},
     "latest"),
    ("wgan_gp_diffaugment", "rgba64_wgangp", {"augment": AUGMENT}, "latest"),
)
COLUMNS = ["Row", "Config + overrides", "Diagnose", "Rules fired (first step)", "Evaluated step",
           "FID vs held-out", "Coverage", "Train wall (s)", "Train CPU (s)", "Load"]
STRIP_SAMPLES = 10
STRIP_SEED = 2024


def run_row(name: str, base: str, overrides: dict, checkpoint: str,
            args: argparse.Namespace) -> dict:
    """Trains one row from scratch in its own workdir, diagnoses and evaluates it."""
    from wgan_jax.runs import load_run

    config = load_config(base)
    common_overrides = {"dataset_size": args.dataset_size, "num_iterations": args.num_iterations,
                        "log_every": args.log_every}
    if args.image_size:
        common_overrides["image_size"] = args.image_size
    overrides = {**common_overrides, **overrides}
    apply_overrides(config, overrides)
    workdir = os.path.join(args.root, name)
    timing = train_timed(config, workdir)
    config, gan, state, step = load_run(workdir, checkpoint)
    strip = os.path.join(workdir, "strip.png")
    from PIL import Image

    Image.fromarray(sample_strip(gan, state, config, STRIP_SAMPLES, STRIP_SEED)).save(strip)
    row = {"row": name, "config": base, "overrides": overrides, "checkpoint": checkpoint,
           "step": step, "workdir": workdir, "strip": strip, **timing,
           "diagnosis": diagnosis(workdir), **heldout_metrics(config, gan, state, seed=0)}
    print(json.dumps(row), flush=True)
    return row


def _overrides_words(row: dict) -> str:
    shared = ("dataset_size", "num_iterations", "image_size", "log_every")
    words = [f"`{k}={v}`" for k, v in row["overrides"].items() if k not in shared]
    return ", ".join(words) or "-"


def cells(r: dict) -> list[str]:
    """A row's table cells before the timing."""
    word, rules = verdict(r)
    return [r["row"], f"{r['config']}: {_overrides_words(r)}", word, rules,
            f"{r['step']}{' (best)' if r['checkpoint'] == 'best' else ''}",
            f"{r['heldout/fid_digits']:.2f}", f"{r['heldout/coverage_digits']:.3f}"]


def table(rows: list[dict]) -> str:
    """The Markdown table of the rows (one line per row, in the order given)."""
    return markdown_table(rows, COLUMNS, cells, "floor: real training pool")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated row names (default: all)")
    add_row_arguments(parser, "/tmp/wgan_remedies",
                      "only print the table (and write the grid) of the rows in this JSONL",
                      iterations=100)
    parser.add_argument("--grid", default="",
                        help="comparison PNG (default: ROOT/remedies.png, or next to --table_from)")
    parser.add_argument("--rediagnose", action="store_true",
                        help="with --table_from: diagnose each row's workdir again")
    parser.add_argument("--dataset_size", type=int, default=500)
    parser.add_argument("--log_every", type=int, default=5,
                        help="metric rows every N iterations (the health rules count rows)")
    args = parser.parse_args()

    if args.table_from:
        order = {r[0]: i for i, r in enumerate(ROWS)}  # rows files may come from parallel runs
        rows = sorted(read_rows(args.table_from), key=lambda r: order.get(r["row"], len(order)))
        grid = args.grid or os.path.splitext(args.table_from)[0] + ".png"
        if args.rediagnose:
            for row in rows:
                if not os.path.isdir(row["workdir"]):
                    print(f"error: --rediagnose: row {row['row']}'s workdir {row['workdir']} "
                          "is gone", file=sys.stderr)
                    sys.exit(2)
                row["diagnosis"] = diagnosis(row["workdir"])
    else:
        from wgan_jax.cli import setup_logging

        setup_logging(True)
        known = [r[0] for r in ROWS]
        wanted = args.only.split(",") if args.only else known
        unknown = [w for w in wanted if w not in known]
        if unknown:
            print(f"error: --only: unknown rows {', '.join(unknown)}; known: {', '.join(known)}",
                  file=sys.stderr)
            sys.exit(2)
        rows = []
        for name, base, overrides, checkpoint in ROWS:
            if name in wanted:
                rows.append(run_row(name, base, overrides, checkpoint, args))
                append_row(args.rows, rows[-1])
        grid = args.grid or os.path.join(args.root, "remedies.png")
    save_comparison(grid, [r["row"] for r in rows], [r["strip"] for r in rows])
    print()
    print(table(rows))
    print(f"\nsample grid: {grid}")


if __name__ == "__main__":
    main()
