"""Sample quality over seeds: trains each config with its own defaults, evaluates, prints Markdown.

    python benchmarks/quality.py [--configs ring8,grid25,stacked_digits,digits] [--seeds 3]
        [--root /tmp/wgan_quality] [--num_iterations N] [--num_samples N]

Toy mixtures are reported in the PacGAN / VEEGAN table format (modes, high-quality %, reverse KL
of the mode histogram, plus exact W1 and training wall time) next to the published numbers;
image configs report modes / KL (stacked digits), FID, KID, precision and recall on the
features their evaluation names (`eval/fid_digits`: the digit classifier's features;
`eval/fid_inception` with `eval.inception_weights`), and the floor: the same metrics of real
examples (an independent draw, not the reference set) against the reference. For `digits`
the held-out split of the digit classifier is the reference too: generated samples and the
training split against it ("FID vs held-out" and the floor). Class-conditional configs
(`configs/digits_conditional.py`) get their own table: the share of generated digits the digit
classifier assigns to their label (`eval/label_accuracy`) and the FID within each class
(`eval/fid_digits_class_mean`, `..._class_worst`), with the floor: the classifier's accuracy on
its held-out digits and the per-class FID of an independent draw of real digits. Each run
trains in this process with `wgan_jax.train.train_and_evaluate` and is evaluated with
`wgan_jax.evaluators.evaluate_state` on the final checkpoint (EMA weights when the config keeps
them). Wall and CPU time (user + system, all threads of this process) are the training's
alone; say what else ran on the machine when you quote wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

from common import (
    REPO,
    add_row_arguments,
    append_row,
    heldout_metrics,
    load_config,
    read_rows,
    renamed,
    train_timed,
)
from common import ms as _ms

DEFAULT_CONFIGS = ("ring8", "grid25", "stacked_digits", "digits")

# Published rows (modes / high-quality % / reverse KL); see shared REFERENCES.md.
PUBLISHED = {
    "ring8": [("PacGAN4 (PacGAN Table 1)", "7.8", "95.9", "0.07"),
              ("GAN (PacGAN Table 1)", "6.3", "98.2", "0.45"),
              ("WGAN-GP (GDPP Table 1)", "6.8", "59.6", "-"),
              ("GDPP-GAN (GDPP Table 1)", "8.0", "71.7", "-")],
    "grid25": [("PacGAN4 (PacGAN Table 1)", "24.8", "93.6", "0.04"),
               ("GAN (PacGAN Table 1)", "17.3", "94.8", "0.70"),
               ("WGAN-GP (GDPP Table 1)", "24.2", "28.7", "-"),
               ("GDPP-GAN (GDPP Table 1)", "24.8", "68.5", "-")],
    "stacked_digits": [("Stacked MNIST, WGAN-GP (GDPP Table 3)", "995", "0.148"),
                       ("Stacked MNIST, PacDCGAN2 (PacGAN Table 2)", "1000", "0.06")],
}


def run_one(name: str, seed: int, root: str, args: argparse.Namespace) -> dict:
    """Train one (config, seed) from scratch and evaluate its final checkpoint."""
    from wgan_jax.evaluators import EvalSpec, evaluate_state, evaluator_for_data
    from wgan_jax.runs import load_run

    config = load_config(name)
    config.seed = seed
    if args.num_iterations:
        config.num_iterations = args.num_iterations
    if args.num_samples:
        config.eval.num_samples = args.num_samples
    workdir = os.path.join(root, f"{os.path.basename(name).removesuffix('.py')}_seed{seed}")
    timing = train_timed(config, workdir)
    config, gan, state, step = load_run(workdir, "latest")
    if args.num_samples:
        config.eval.num_samples = args.num_samples
    spec = EvalSpec.from_config(config)
    evaluator = evaluator_for_data(spec, seed=0)
    metrics = evaluate_state(spec, gan, state, seed=seed, evaluator=evaluator)
    row = {"config": name, "seed": seed, "step": step, **timing, **metrics}
    if spec.jacobian_truncation:  # the same generator sampled plainly, beside it
        plain = dataclasses.replace(spec, jacobian_truncation=0.0)
        row.update(renamed("plain", evaluate_state(plain, gan, state, seed=seed,
                                                   evaluator=evaluator)))
        row["jacobian_truncation"] = spec.jacobian_truncation
    if evaluator is not None and evaluator.class_metrics:
        row.update(conditional_floor(config, evaluator, seed))
    elif config.dataset == "digits":
        row.update(heldout_metrics(config, gan, state, seed))
    elif evaluator is not None and evaluator.kind not in ("toy", "swissroll"):
        # The floor: real examples from an independent draw against the same reference.
        real = _pipeline(config).reference_samples(int(config.eval.num_samples), 10_000 + seed)
        row.update(renamed("floor", evaluator(real)))
    print(json.dumps(row), flush=True)
    return row


def conditional_floor(config, evaluator, seed: int) -> dict:
    """Conditional digits: the floor of the class metrics. "floor/label_accuracy" is the digit
    classifier's accuracy on its 297 held-out digits at the run's size (what the evaluator's
    start line logs); "floor/fid_digits_class_*" and "floor/fid_digits" score an independent
    draw of `eval.num_samples` real digits, with their labels, against the same reference."""
    from wgan_jax.evaluators import heldout_label_accuracy

    data = _pipeline(config)
    n, draw = int(config.eval.num_samples), 10_000 + seed
    floor = renamed("floor", evaluator(data.reference_samples(n, draw),
                                        data.reference_labels(n, draw)))
    floor["floor/label_accuracy"] = heldout_label_accuracy(
        evaluator.classifier, config.image_size, config.num_channels)[0]
    return floor


def _pipeline(config):
    from wgan_jax.data.spec import DataSpec
    from wgan_jax.input_pipeline import create_input_pipeline
    from wgan_jax.step import make_mesh

    return create_input_pipeline(DataSpec.from_config(config), make_mesh())


def _feature_suffix(row: dict) -> str | None:
    """"_digits" / "_inception" for a row of feature metrics ("" for rows written before the
    feature space was in the names), None for a row without them."""
    from wgan_jax.metrics.ranking import split_name

    for key in row:
        name, space = split_name(key)
        if key.startswith("eval/") and name == "fid":
            return f"_{space}" if space else ""
    return None


def toy_table(rows: list[dict]) -> str:
    lines = ["| Config | Method | Modes | High-quality samples (%) | Reverse KL | W1 | "
             "Train wall time (s) |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]
        truncated = (f", Jacobian truncation {rs[0]['jacobian_truncation']:.0%}"
                     if "jacobian_truncation" in rs[0] else "")
        for prefix, how in (("eval", truncated), ("plain", ", the generator alone")):
            if f"{prefix}/high_quality" not in rs[0]:
                continue
            lines.append(
                f"| {name} | wgan_jax ({len(rs)} seeds{how})"
                f" | {_ms([r[f'{prefix}/modes'] for r in rs], digits=1)}"
                f" | {_ms([r[f'{prefix}/high_quality'] for r in rs], 100, 1)}"
                f" | {_ms([r[f'{prefix}/reverse_kl'] for r in rs], digits=4)}"
                f" | {_ms([r[f'{prefix}/w1'] for r in rs], digits=4)}"
                f" | {_ms([r['wall_seconds'] for r in rs], digits=0)} |")
        for method, modes, hq, kl in PUBLISHED.get(os.path.basename(name), []):
            lines.append(f"| {name} | {method} | {modes} | {hq} | {kl} | - | - |")
    return "\n".join(lines)


def image_table(rows: list[dict]) -> str:
    lines = ["| Config | Method | Features | Modes | KL | FID | FID vs held-out | "
             "FID floor (real vs real) | KID | Precision | Recall | Train wall time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]
        f = _feature_suffix(rs[0]) or ""

        def col(key: str, digits: int = 3, rs=rs) -> str:
            return _ms([r[key] for r in rs], digits=digits) if key in rs[0] else "-"

        lines.append(
            f"| {name} | wgan_jax ({len(rs)} seeds) | {f.lstrip('_') or '-'}"
            f" | {col('eval/modes', 1)} | {col('eval/kl')}"
            f" | {col(f'eval/fid{f}')} | {col(f'heldout/fid{f}')} | {col(f'floor/fid{f}')}"
            f" | {col(f'eval/kid{f}', 4)} | {col(f'eval/precision{f}')}"
            f" | {col(f'eval/recall{f}')} | {col('wall_seconds', 0)} |")
        for method, modes, kl in PUBLISHED.get(os.path.basename(name), []):
            lines.append(f"| {name} | {method} | - | {modes} | {kl} | - | - | - | - | - | - | - |")
    return "\n".join(lines)


def conditional_table(rows: list[dict]) -> str:
    """Class-conditional configs: label accuracy and per-class FID (digit features), each
    config's generated samples ("eval/*") and its floor of real digits ("floor/*")."""
    lines = ["| Config | Samples | Label accuracy | FID per class, mean | FID per class, worst "
             "(class) | FID (all classes) | Train wall time (s) | Train CPU time (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]
        seeds = f"wgan_jax, {len(rs)} seed{'s' if len(rs) > 1 else ''}"
        times = (f"{_ms([r['wall_seconds'] for r in rs], digits=0)} | "
                 f"{_ms([r.get('cpu_seconds', math.nan) for r in rs], digits=0)}")
        for who, prefix, time_cells in ((seeds, "eval", times), ("real digits (floor)", "floor",
                                                                 "- | -")):
            def cell(key: str, scale: float = 1.0, digits: int = 2, rs=rs, p=prefix) -> str:
                return _ms([r[f"{p}/{key}"] for r in rs], scale, digits)

            worst = "/".join(str(int(r[f"{prefix}/fid_digits_class_worst_label"])) for r in rs)
            lines.append(
                f"| {name} | {who} | {cell('label_accuracy', 100, 1)}%"
                f" | {cell('fid_digits_class_mean')} | {cell('fid_digits_class_worst')} ({worst})"
                f" | {cell('fid_digits')} | {time_cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help="comma-separated config names under configs/ (or .py paths)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0, help="seeds first_seed, ...")
    add_row_arguments(parser, "/tmp/wgan_quality",
                      "only print the tables of the rows in this JSONL (no training)",
                      image_size=False)
    parser.add_argument("--num_samples", type=int, default=0, help="override eval.num_samples")
    args = parser.parse_args()

    if args.table_from:
        print_tables(read_rows(args.table_from))
        return
    from wgan_jax.cli import setup_logging

    setup_logging(True)
    names = []
    for name in args.configs.split(","):
        path = name if name.endswith(".py") else os.path.join(REPO, "configs", f"{name}.py")
        if os.path.exists(path):
            names.append(name)
        else:
            print(f"skipping {name}: {path} does not exist", file=sys.stderr)
    rows = []
    for name in names:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows.append(run_one(name, seed, args.root, args))
            append_row(args.rows, rows[-1])
    print_tables(rows)


def print_tables(rows: list[dict]) -> None:
    """The toy, image and conditional tables of whichever rows there are."""
    toy = [r for r in rows if "eval/high_quality" in r]
    conditional = [r for r in rows if "eval/label_accuracy" in r]
    images = [r for r in rows if _feature_suffix(r) is not None and r not in conditional]
    print()
    if toy:
        print(toy_table(toy))
        print()
    if images:
        print(image_table(images))
        print()
    if conditional:
        print(conditional_table(conditional))


if __name__ == "__main__":
    main()
