"""What the benchmark scripts share: configs and their overrides, a timed training run, the
digits held-out split and its metrics, diagnose's verdict, JSONL rows, sample strips, tables.

Imported by `quality.py`, `remedies.py` and `small_data.py` (run as scripts from the repository,
so `benchmarks/` is on `sys.path`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Mapping

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(name: str):
    """`configs/NAME.py` (or a .py path): its `get_config()`."""
    path = name if name.endswith(".py") else os.path.join(REPO, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_config_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def apply_overrides(config, overrides: Mapping[str, object]) -> None:
    """Sets dotted keys ("model.critic_norm") of `config`; a key the config does not have is
    a `KeyError` naming it (an override must never be dropped quietly)."""
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"config has no key {key!r}")
        node[leaf] = value


def config_value(config: Mapping, key: str) -> object:
    """The value of dotted `key` in a config dict (e.g. a workdir's config.json)."""
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def train_timed(config, workdir: str, continue_from: str = "") -> dict:
    """Trains `config` from scratch in `workdir` (removed first) in this process, or, with
    `continue_from`, from a copy of that shorter run's workdir (exact resume; the times are
    the continuation's): the training wall time, the process CPU time (all threads) and the
    1-minute load average before and after (the machine may be shared)."""
    from wgan_jax.train import train_and_evaluate

    shutil.rmtree(workdir, ignore_errors=True)
    if continue_from:
        shutil.copytree(continue_from, workdir, ignore=shutil.ignore_patterns(".lock"))
    load_before = os.getloadavg()[0]
    t0, c0 = time.monotonic(), time.process_time()
    result = train_and_evaluate(config, workdir)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    return {"wall_seconds": wall, "cpu_seconds": cpu,
            "load": (load_before + os.getloadavg()[0]) / 2,
            "last_step": int(result["step"]) if isinstance(result, dict) else None}


def renamed(prefix: str, metrics: Mapping) -> dict:
    """{"eval/fid_digits": v} -> {"<prefix>/fid_digits": v}."""
    return {f"{prefix}/{k.split('/')[-1]}": v for k, v in metrics.items()}


def ms(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """One value, or mean ± sample std of several."""
    v = np.asarray(values, dtype=np.float64) * scale
    if len(v) == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def heldout_split(config) -> tuple[np.ndarray, np.ndarray]:
    """(training pool, held-out) indices into the 1,797 `digits` for `config`.

    A run on all digits (`dataset_size = 0`) has no unseen digits; its held-out split is the
    digit classifier's (`train_test_split_indices`: 297 digits the classifier never saw). A run
    on `dataset_size = N` trains on the first N of the fixed `dataset_size` permutation; its
    held-out split is that permutation's last 297 digits, which no N <= 1,500 ever trains on
    (the pool is the first 1,500), so rows of different sizes share one held-out set.
    """
    from wgan_jax.data.digits import digits_source
    from wgan_jax.data.images import SubsetSource
    from wgan_jax.metrics.digits_classifier import NUM_TRAIN, train_test_split_indices

    n = len(digits_source(8).images)
    if not config.dataset_size:
        return train_test_split_indices(n)
    if config.dataset_size > NUM_TRAIN:
        raise ValueError(f"dataset_size={config.dataset_size}: a held-out split needs at most "
                         f"{NUM_TRAIN} training digits")
    pool = SubsetSource(range(n), NUM_TRAIN).indices
    return pool, np.setdiff1d(np.arange(n), pool)


def heldout_metrics(config, gan, state, seed: int, memorised: bool = False) -> dict:
    """digits: metrics against the held-out split (`heldout_split`), generated and real.

    "heldout/*" are 1,500 generated samples against the held-out digits and "floor/*" the
    1,500 training-pool digits against them: the best a generator of the training pool can do
    with these sample sizes. With `memorised`, "memorised/*" are the run's own `dataset_size`
    training digits tiled to 1,500 samples: what a generator that copies its training set
    scores. Features: the evaluation's own (`eval.features`; for RGBA sprites the digit
    classifier on the alpha channel).
    """
    from wgan_jax.data.digits import digits_source
    from wgan_jax.data.images import SubsetSource, to_float
    from wgan_jax.evaluators import EvalSpec, evaluate_state, make_evaluator

    images = to_float(digits_source(config.image_size, config.num_channels).images)
    train_idx, test_idx = heldout_split(config)
    spec = EvalSpec.from_config(config)
    evaluator = make_evaluator(spec, lambda n, s: images[test_idx], seed=0)
    fake = evaluate_state(spec, gan, state, seed, evaluator=evaluator, num_samples=len(train_idx))
    out = {**renamed("heldout", fake), **renamed("floor", evaluator(images[train_idx]))}
    if memorised:
        own = SubsetSource(range(len(images)), config.dataset_size).indices
        out.update(renamed("memorised", evaluator(images[np.resize(own, len(train_idx))])))
    return out


def diagnosis(workdir: str) -> dict:
    """`wgan_jax.diagnose.diagnose`'s verdict: healthy, and each rule that fired with its
    first step and whether it was still present at the end."""
    from wgan_jax.diagnose import diagnose

    report = diagnose(workdir)
    return {"healthy": bool(report["healthy"]),
            "rules": [{"rule": p["rule"], "first_step": p["first_step"], "ongoing": p["ongoing"]}
                      for p in report["problems"]]}


def verdict(row: Mapping) -> tuple[str, str]:
    """("healthy" / "problems", "rule (from step S, ongoing), ...") of a row's diagnosis."""
    d = row["diagnosis"]
    rules = ", ".join(f"{r['rule']} (from {r['first_step']}{', ongoing' if r['ongoing'] else ''})"
                      for r in d["rules"])
    return ("healthy" if d["healthy"] else "**problems**"), (rules or "-")


def sample_strip(gan, state, config, num: int, seed: int) -> np.ndarray:
    """`num` samples of `state` in one RGB uint8 row (RGBA over a checkerboard)."""
    from wgan_jax.plots import grid_rgb
    from wgan_jax.sampling import draw_samples

    use_ema = config.ema_decay > 0 and getattr(state, "ema_params", None) is not None
    images = draw_samples(gan, state, num, seed=seed, use_ema=use_ema)
    if images.shape[1] < 32:
        factor = -(-32 // images.shape[1])
        images = images.repeat(factor, axis=1).repeat(factor, axis=2)
    return grid_rgb(images, ncols=num)


def save_comparison(path: str, labels: list[str], strips: list[str]) -> None:
    """One PNG: a row per (label, strip PNG path), the label written at the left (64-colour
    palette)."""
    from PIL import Image, ImageDraw

    rows = [np.asarray(Image.open(p).convert("RGB")) for p in strips]
    width = max(r.shape[1] for r in rows)
    label_w = 170
    out = Image.new("RGB", (label_w + width, sum(r.shape[0] for r in rows)), (255, 255, 255))
    draw = ImageDraw.Draw(out)
    y = 0
    for label, row in zip(labels, rows, strict=True):
        out.paste(Image.fromarray(row), (label_w, y))
        draw.text((4, y + row.shape[0] // 2 - 6), label, fill=(0, 0, 0))
        y += row.shape[0]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # 64 colours are plenty for sprites over a checkerboard and keep the file small (~200 kB).
    out.quantize(colors=64).save(path, format="PNG", optimize=True)


def add_row_arguments(parser, root: str, table_from: str, iterations: int = 0,
                      image_size: bool = True) -> None:
    """The flags the benchmark scripts share: --rows, --table_from (what it reprints), --root,
    --num_iterations (`iterations`; 0 keeps the config's) and, if `image_size`, --image_size."""
    parser.add_argument("--rows", default="", help="also append each result row to this JSONL")
    parser.add_argument("--table_from", default="", help=table_from)
    parser.add_argument("--root", default=root, help="parent of the workdirs")
    parser.add_argument("--num_iterations", type=int, default=iterations,
                        help="iterations of every run (0: the config's)")
    if image_size:
        parser.add_argument("--image_size", type=int, default=0,
                            help="override the configs' image size (tests: 8); 0 keeps it")


def markdown_table(rows: list[dict], columns: list[str], cells, floor_label: str) -> str:
    """A Markdown table of training rows: `cells(row)` gives each row's cells up to the timing
    (train wall, train CPU, load: the last three `columns`), then one floor line: `floor_label`,
    the real training pool's FID and coverage against the held-out split under
    "FID vs held-out" and "Coverage", "-" in the other columns."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        timing = [f"{r['wall_seconds']:.0f}", f"{r['cpu_seconds']:.0f}", f"{r['load']:.1f}"]
        lines.append("| " + " | ".join([*cells(r), *timing]) + " |")
    floor = {"FID vs held-out": f"{rows[0]['floor/fid_digits']:.2f}",
             "Coverage": f"{rows[0]['floor/coverage_digits']:.3f}"}
    lines.append("| " + " | ".join([floor_label] + [floor.get(c, "-") for c in columns[1:]])
                 + " |")
    return "\n".join(lines)


def append_row(path: str, row: Mapping) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def read_rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
