"""The GPU speed table, GPU-vs-CPU first-iteration equality and checkpoints across platforms.

    python benchmarks/gpu_table.py table [--models toy,dcgan32,dcgan64,resnet32] [--rounds 3]
        [--iters 20] [--warmup 3] [--sides ours_f32,ours_bf16,torch_eager,torch_compile]
        [--precision default] [--expect_platform gpu] [--override KEY=VALUE ...] [--json F]
    python benchmarks/gpu_table.py crosscheck --out DIR [--configs bench_toy,bench_dcgan32]
        [--precisions highest,default] [--ckpt_config default] [--expect_platform gpu]
    python benchmarks/gpu_table.py first --configs NAME,... --precisions P,... --label L --out DIR
    python benchmarks/gpu_table.py compare A.json B.json [--tol 1e-5]
    python benchmarks/gpu_table.py ckpt --phase train|resume --root DIR --label L [--config NAME]
    python benchmarks/gpu_table.py quality [--configs toy_25gaussians,digits] [--seeds 2]
        [--dtypes float32,bfloat16] [--precision default] [--json F]

`table` times seconds per generator iteration in ONE process: each model's sides are built
and compiled once (ours: the project's train step on one device, float32 at `--precision` and
bfloat16 compute; PyTorch: `torch_reference.Trainer`, the same networks, eager and with
`torch.compile`, on CUDA when JAX runs on a GPU, TF32 on unless `--precision highest`), then
each round times `--iters` iterations of every side, blocking on each, the order rotating
between rounds so that a slow spell hits every side. The table shows the median over rounds
of each side's median, the ratios PyTorch / ours, the network's GFLOP per iteration
(`train_step.model_flops`, the same count for both frameworks) and each side's share of the
measured matmul peak (float32 at `--precision` for the float32 sides, bfloat16 for ours in
bfloat16). The models are `configs/bench_MODEL.py`, DCGAN-32 at batch 64 (the others at their
configs' batch: toy 256, DCGAN-64 RGBA 64, ResNet-32 64; n_critic 5). Without torch, or with
`--override` (which changes our networks but not torch_reference's), the PyTorch columns are
skipped with a note.

`crosscheck` runs, in subprocesses, `first` on the CPU (JAX_PLATFORMS=cpu) and on the default
platform, compares every config and precision (`compare`), then trains `--ckpt_config` for
2 iterations on each platform (`ckpt --phase train`) and resumes both checkpoints for one more
iteration on each platform (`ckpt --phase resume`): a CPU checkpoint resumed on the GPU must
give the iteration the CPU gives, and the other way round (within `--tol` at "highest").
`quality` trains each config in float32 and in bfloat16 compute (`compute_dtype`) for
`--seeds` seeds on this platform and prints every evaluation metric of the final checkpoints,
mean +- std per dtype: bfloat16's training quality against float32's.
`--expect_platform gpu` makes the non-CPU side refuse to run anywhere but on a GPU (JAX falls
back to the CPU with only a warning when its CUDA plugin fails). See docs/accelerators.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and torch share the GPU

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import apply_overrides, load_config  # noqa: E402

MODELS = ("toy", "dcgan32", "dcgan64", "resnet32")
BATCH = {"dcgan32": 64}  # the table's batch where it differs from configs/bench_MODEL.py
SIDES = ("ours_f32", "ours_bf16", "ours_f32_highest", "torch_eager", "torch_compile")
DEFAULT_SIDES = ("ours_f32", "ours_bf16", "torch_eager", "torch_compile")
LABELS = {"ours_f32": "ours f32", "ours_bf16": "ours bf16", "ours_f32_highest": "ours f32 highest",
          "torch_eager": "PyTorch eager", "torch_compile": "torch.compile"}


def parse_override(text: str) -> tuple[str, object]:
    """"model.width=8" -> ("model.width", 8); a value that is no Python literal stays a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def check_platform(expect: str) -> str:
    """The default JAX platform; `SystemExit` when it is not `expect` (when given)."""
    import jax

    platform = jax.default_backend()
    if expect and platform != expect:
        sys.exit(f"error: JAX runs on {platform!r}, not {expect!r} (is the accelerator's plugin "
                 f"installed? pip install \".[cuda]\"; JAX falls back to the CPU with a warning)")
    return platform


def model_config(model: str, overrides: list[tuple[str, object]], dtype: str = "float32",
                 precision: str = "default"):
    """configs/bench_MODEL.py at the table's batch, with `overrides`, dtype and precision."""
    config = load_config(f"bench_{model}")
    if model in BATCH:
        config.global_batch_size = BATCH[model]
    apply_overrides(config, dict(overrides))
    config.compute_dtype, config.matmul_precision = dtype, precision
    return config


class Ours:
    """The project's train step of `config`, compiled on one device, with resident batches."""

    def __init__(self, config) -> None:
        import jax
        import numpy as np
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from wgan_jax.config import data_shape
        from wgan_jax.state import create_train_state
        from wgan_jax.step import StepConfig, make_mesh, make_train_step
        from wgan_jax.train import build_gan, replicate

        mesh = make_mesh(jax.devices()[:1])
        shape, gan = data_shape(config), build_gan(config)
        self.state = replicate(create_train_state(gan, shape, config.seed, False), mesh)
        real = np.random.default_rng(0).uniform(
            -1, 1, (config.n_critic, config.global_batch_size, *shape)).astype(np.float32)
        self.real = jax.device_put(real, NamedSharding(mesh, P(None, "data")))
        step = make_train_step(StepConfig.from_config(config), mesh, gan)
        t0 = time.perf_counter()
        self.step = step.lower(self.state, self.real).compile()
        self.compile_seconds = time.perf_counter() - t0

    def iteration(self) -> None:
        import jax

        self.state, metrics = self.step(self.state, self.real)
        jax.block_until_ready((self.state, metrics))


class Theirs:
    """torch_reference's trainer of `model` (eager or torch.compile) on `device`."""

    def __init__(self, model: str, batch: int, device: str, compiled: bool) -> None:
        import dataclasses

        import torch_reference

        setting = dataclasses.replace(torch_reference.SETTINGS[model], batch=batch)
        self.trainer = torch_reference.Trainer(model, setting, device=device, compiled=compiled)
        self.compile_seconds = 0.0
        self.compiled = compiled

    def iteration(self) -> None:
        self.trainer.iteration()  # ends in float(loss): waits for the device


def torch_status(overrides: list) -> str:
    """"" when the PyTorch sides can run, else why not (one line)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed: PyTorch columns skipped (pip install torch)"
    if overrides:
        return ("--override changes our networks but not torch_reference's: PyTorch columns "
                "skipped")
    return ""


def set_torch_precision(precision: str) -> str:
    """TF32 for PyTorch's float32 products and convolutions unless `precision` is "highest"
    (XLA's "default" and "high" are TF32 on Ampere+ GPUs too); the device torch runs on."""
    import torch

    tf32 = precision != "highest"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_sides(model: str, sides: list[str], precision: str, overrides: list, torch_note: str,
                device: str) -> dict:
    """{side: runner} for one model (PyTorch sides left out when `torch_note` says so)."""
    runners = {}
    for side in sides:
        if side.startswith("ours"):
            dtype = "bfloat16" if side == "ours_bf16" else "float32"
            p = "highest" if side == "ours_f32_highest" else precision
            runners[side] = Ours(model_config(model, overrides, dtype, p))
        elif not torch_note:
            batch = model_config(model, overrides).global_batch_size
            runners[side] = Theirs(model, batch, device, side == "torch_compile")
    return runners


def time_rounds(runners: dict, rounds: int, iters: int, warmup: int) -> dict:
    """{model: {side: [median seconds per round]}}; the side order rotates between rounds."""
    out = {m: {s: [] for s in sides} for m, sides in runners.items()}
    for sides in runners.values():
        for side, runner in sides.items():
            t0 = time.perf_counter()
            for _ in range(warmup):
                runner.iteration()
            if side == "torch_compile":
                runner.compile_seconds = time.perf_counter() - t0
    for r in range(rounds):
        for model, sides in runners.items():
            names = list(sides)
            names = names[r % len(names):] + names[:r % len(names)]
            for side in names:
                times = []
                for _ in range(iters):
                    t = time.perf_counter()
                    sides[side].iteration()
                    times.append(time.perf_counter() - t)
                out[model][side].append(statistics.median(times))
            print(f"round {r + 1} {model}: " + ", ".join(
                f"{LABELS[s]} {out[model][s][-1] * 1e3:.2f} ms" for s in sides),
                file=sys.stderr, flush=True)
    return out


def table(records: dict) -> str:
    """The Markdown table of a `table` run's records."""
    sides = [s for s in SIDES if any(s in r["seconds"] for r in records["models"].values())]
    ours = [s for s in sides if s.startswith("ours")]
    theirs = [s for s in sides if s.startswith("torch")]
    ratios = [(t, o) for t in theirs for o in ("ours_f32", "ours_bf16") if o in ours]
    head = (["model", "batch", *(f"{LABELS[s]} ms/iteration" for s in sides),
             *(f"{LABELS[t]} / {LABELS[o]}" for t, o in ratios), "GFLOP/iteration",
             *(f"{LABELS[s]} TFLOP/s (share of peak)" for s in sides), "compile s"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    peaks = records["peaks"]
    for model, r in records["models"].items():
        med = {s: statistics.median(v) for s, v in r["seconds"].items()}
        gflop = r["flops_per_iteration"] / 1e9
        cells = [model, str(r["batch"]), *(f"{med[s] * 1e3:.2f}" for s in sides)]
        for t, o in ratios:
            per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(
                r["seconds"][t], r["seconds"][o], strict=True))
            cells.append(f"**{med[t] / med[o]:.2f}** ({per_round})")
        cells.append(f"{gflop:.2f}")
        for s in sides:
            peak = peaks["bfloat16" if s == "ours_bf16" else "float32"]
            rate = gflop / med[s] / 1e3
            cells.append(f"{rate:.3g} ({rate * 1e12 / peak:.0%})")
        cells.append(", ".join(f"{LABELS[s]} {r['compile_seconds'][s]:.1f}"
                               for s in sides if r["compile_seconds"].get(s)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(records: dict) -> list[str]:
    """Issue 28's goals against this run (DCGAN-32, ResNet-32)."""
    out = []
    for model in ("dcgan32", "resnet32"):
        r = records["models"].get(model)
        if not r:
            continue
        med = {s: statistics.median(v) for s, v in r["seconds"].items()}
        for side in ("ours_f32", "ours_bf16"):
            if side not in med:
                continue
            parts = []
            if "torch_eager" in med:
                parts.append(f"eager / ours {med['torch_eager'] / med[side]:.2f} (goal >= 1.5)")
            if "torch_compile" in med:
                parts.append(f"torch.compile / ours {med['torch_compile'] / med[side]:.2f} "
                             "(goal >= 1.0)")
            if model == "resnet32" and side == "ours_bf16":
                parts.append(f"{med[side] * 1e3:.1f} ms (goal < 20 ms)")
            if parts:
                out.append(f"{model} {LABELS[side]}: " + ", ".join(parts))
    return out


def run_table(args) -> None:
    import jax

    platform = check_platform(args.expect_platform)
    import train_step

    sides = args.sides.split(",")
    bad = [s for s in sides if s not in SIDES] + [m for m in args.models if m not in MODELS]
    if bad:
        sys.exit(f"error: unknown {', '.join(bad)}; sides from {', '.join(SIDES)}, models from "
                 f"{', '.join(MODELS)}")
    with_torch = any(s.startswith("torch") for s in sides)
    note = torch_status(args.override) if with_torch else ""
    device = set_torch_precision(args.precision) if with_torch and not note else "cpu"
    if with_torch and not note and platform == "gpu" and device != "cuda":
        note = "torch sees no CUDA device: PyTorch columns skipped"
    runners = {m: build_sides(m, sides, args.precision, args.override, note, device)
               for m in args.models}
    seconds = time_rounds(runners, args.rounds, args.iters, args.warmup)
    sizes = tuple(args.peak_sizes) or ((2048, 4096, 8192) if platform == "gpu" else (512, 1024))
    records = {
        "platform": platform, "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__, "precision": args.precision, "torch_note": note,
        "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup,
        "peaks": {dtype: train_step.matmul_peak(sizes, dtype=dtype, precision=args.precision)
                  for dtype in ("float32", "bfloat16")},
        "models": {},
    }
    if not note and any(s.startswith("torch") for s in sides):
        import torch

        records["torch"] = torch.__version__
    for model, sides_of in runners.items():
        config = model_config(model, args.override)
        records["models"][model] = {
            "batch": config.global_batch_size, "n_critic": config.n_critic,
            "seconds": seconds[model],
            "compile_seconds": {s: r.compile_seconds for s, r in sides_of.items()},
            "flops_per_iteration": train_step.model_flops(config),
        }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    print(f"{platform} ({records['device_kind']}), jax {records['jax']}, "
          f"torch {records.get('torch', '-')}, matmul precision {args.precision}; matmul peak "
          f"float32 {records['peaks']['float32'] / 1e12:.2f} TFLOP/s, bfloat16 "
          f"{records['peaks']['bfloat16'] / 1e12:.2f} TFLOP/s; median over {args.rounds} "
          f"rounds of the median of {args.iters} iterations")
    if note:
        print(f"note: {note}")
    print(table(records))
    for line in goals(records):
        print(line)


def first_iterations(config, iters: int = 1) -> list[dict[str, float]]:
    """The metrics of `config`'s first `iters` iterations on one device of the default platform,
    on fixed uniform batches (`numpy` seed 0: the same on every platform)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from wgan_jax.config import data_shape
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, make_mesh, make_train_step
    from wgan_jax.train import build_gan, replicate

    mesh = make_mesh(jax.devices()[:1])
    shape, gan = data_shape(config), build_gan(config)
    state = replicate(create_train_state(gan, shape, config.seed, config.ema_decay > 0), mesh)
    step = make_train_step(StepConfig.from_config(config), mesh, gan)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(iters):
        real = rng.uniform(-1, 1, (config.n_critic, config.global_batch_size, *shape))
        real = jax.device_put(real.astype(np.float32), NamedSharding(mesh, P(None, "data")))
        state, metrics = step(state, real)
        rows.append({k: float(v) for k, v in metrics.items()})
    return rows


def run_first(args) -> None:
    import jax

    platform = check_platform(args.expect_platform)
    os.makedirs(args.out, exist_ok=True)
    for name in args.configs.split(","):
        for precision in args.precisions.split(","):
            config = load_config(name)
            # Gradient norms too (the bench configs turn diagnostics off): Adam's normalised
            # update would hide a wrong gradient scale in the losses of the first iteration.
            config.diagnostics.level = "basic"
            apply_overrides(config, dict(args.override))
            config.matmul_precision = precision
            record = {"label": args.label, "platform": platform, "config": name,
                      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
                      "matmul_precision": precision, "compute_dtype": config.compute_dtype,
                      "overrides": dict(args.override),
                      "iterations": first_iterations(config, args.iters)}
            path = os.path.join(args.out, f"first_{args.label}_{name}_{precision}.json")
            with open(path, "w") as f:
                json.dump(record, f, indent=1)
            print(f"wrote {path}", file=sys.stderr)


def compare_metrics(a: dict[str, float], b: dict[str, float], tol: float) -> dict:
    """Largest difference between the metrics both have, each relative to max(1, |a|)."""
    keys = sorted(set(a) & set(b))
    diffs = {k: abs(a[k] - b[k]) / max(1.0, abs(a[k])) for k in keys}
    worst = max(diffs, key=diffs.get) if diffs else ""
    return {"metrics": len(keys), "max_diff": diffs.get(worst, 0.0), "worst": worst,
            "within": bool(keys) and all(d <= tol for d in diffs.values()), "tol": tol}


def compare_files(path_a: str, path_b: str, tol: float) -> dict:
    """`compare_metrics` of two `first` records' first iterations (or two `ckpt` records)."""
    with open(path_a) as f:
        a = json.load(f)
    with open(path_b) as f:
        b = json.load(f)
    return compare_metrics(a["iterations"][0], b["iterations"][0], tol)


def run_compare(args) -> None:
    result = compare_files(args.a, args.b, args.tol)
    print(json.dumps(result))
    if not result["within"]:
        sys.exit(1)


def ckpt_config(name: str, overrides: list, iterations: int):
    """The checkpoint check's run: `name` for `iterations`, a row per iteration, a checkpoint
    only at the end, no evaluation, at "highest" precision."""
    config = load_config(name)
    apply_overrides(config, {"num_iterations": iterations, "log_every": 1, "sample_every": 0,
                             "plot_every": 0, "checkpoint_every": 0, "eval_every": 0,
                             "matmul_precision": "highest", **dict(overrides)})
    return config


def run_ckpt(args) -> None:
    """train: ROOT/trained_LABEL after `--iters` iterations on this platform. resume: every
    ROOT/trained_* copied to ROOT/FROM_on_LABEL and trained one more iteration here."""
    from wgan_jax.records import METRICS_FILE, read_jsonl
    from wgan_jax.train import train_and_evaluate

    platform = check_platform(args.expect_platform)
    from common import train_timed

    if args.phase == "train":
        workdir = os.path.join(args.root, f"trained_{args.label}")
        train_timed(ckpt_config(args.config, args.override, args.iters), workdir)
        print(f"trained {workdir} on {platform}", file=sys.stderr)
        return
    for source in sorted(os.listdir(args.root)):
        if not source.startswith("trained_"):
            continue
        origin = source.removeprefix("trained_")
        workdir = os.path.join(args.root, f"{origin}_on_{args.label}")
        config = ckpt_config(args.config, args.override, args.iters + 1)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(os.path.join(args.root, source), workdir,
                        ignore=shutil.ignore_patterns(".lock"))
        result = train_and_evaluate(config, workdir)
        if result["start_step"] != args.iters:
            sys.exit(f"error: {workdir} started at step {result['start_step']}, not from the "
                     f"checkpoint of step {args.iters}")
        rows = [r for r in read_jsonl(os.path.join(workdir, METRICS_FILE))
                if r.get("step", 0) > args.iters and "critic_loss" in r]
        record = {"label": args.label, "platform": platform, "from": origin,
                  "start_step": result["start_step"], "last_step": result["step"],
                  "iterations": [{k: v for k, v in rows[-1].items()
                                  if k != "step" and "second" not in k}]}  # no timings
        with open(os.path.join(args.root, f"resume_{origin}_on_{args.label}.json"), "w") as f:
            json.dump(record, f, indent=1)
        print(f"resumed {source} on {platform} from step {result['start_step']} to "
              f"{result['step']}", file=sys.stderr)


def run_quality(args) -> None:
    """Trains each config with each compute dtype and seed (this process, this platform),
    evaluates the final checkpoint and prints mean +- std of every evaluation metric."""
    from common import ms, train_timed

    from wgan_jax.evaluators import EvalSpec, evaluate_state, evaluator_for_data
    from wgan_jax.runs import load_run

    platform = check_platform(args.expect_platform)
    rows = []
    for name in args.configs.split(","):
        for dtype in args.dtypes.split(","):
            for seed in range(args.seeds):
                config = load_config(name)
                apply_overrides(config, {**dict(args.override), "compute_dtype": dtype,
                                         "matmul_precision": args.precision, "seed": seed})
                workdir = os.path.join(args.root, f"{name}_{dtype}_seed{seed}")
                timing = train_timed(config, workdir)
                config, gan, state, _ = load_run(workdir, "latest")
                spec = EvalSpec.from_config(config)
                metrics = evaluate_state(spec, gan, state, seed=seed,
                                         evaluator=evaluator_for_data(spec, seed=0))
                rows.append({"config": name, "dtype": dtype, "seed": seed, **timing, **metrics})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{platform}, matmul precision {args.precision}, {args.seeds} seeds, final checkpoint")
    for name in args.configs.split(","):
        keys = sorted(k for k in rows[[r["config"] for r in rows].index(name)]
                      if k.startswith("eval/"))
        print(f"\n| {name} | " + " | ".join(k.removeprefix("eval/") for k in keys)
              + " | train wall s |")
        print("|---" * (len(keys) + 2) + "|")
        for dtype in args.dtypes.split(","):
            rs = [r for r in rows if r["config"] == name and r["dtype"] == dtype]
            print(f"| {dtype} | " + " | ".join(ms([r[k] for r in rs], digits=3) for k in keys)
                  + f" | {ms([r['wall_seconds'] for r in rs], digits=0)} |")


def _sub(args: list[str], cpu: bool) -> None:
    """Runs this script with `args` in a fresh process, on the CPU when `cpu`."""
    env = dict(os.environ)
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    print(f"{time.strftime('%H:%M:%S')} {'JAX_PLATFORMS=cpu ' if cpu else ''}gpu_table.py "
          f"{' '.join(args)}", file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: gpu_table.py {' '.join(args)} failed:\n{out.stderr[-3000:]}")


def run_crosscheck(args) -> None:
    over = [a for k, v in args.override for a in ("--override", f"{k}={v!r}")]
    expect = ["--expect_platform", args.expect_platform] if args.expect_platform else []
    os.makedirs(args.out, exist_ok=True)
    first = ["first", "--configs", args.configs, "--out", args.out, *over]
    _sub([*first, "--label", "cpu", "--precisions", "highest", "--expect_platform", "cpu"], True)
    _sub([*first, "--label", "accel", "--precisions", args.precisions, *expect], False)
    root = os.path.join(args.out, "ckpt")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ckpt = ["ckpt", "--root", root, "--config", args.ckpt_config, *over]
    for phase in ("train", "resume"):
        _sub([*ckpt, "--phase", phase, "--label", "cpu", "--expect_platform", "cpu"], True)
        _sub([*ckpt, "--phase", phase, "--label", "accel", *expect], False)
    rows = []
    for name in args.configs.split(","):
        for precision in args.precisions.split(","):
            result = compare_files(
                os.path.join(args.out, f"first_cpu_{name}_highest.json"),
                os.path.join(args.out, f"first_accel_{name}_{precision}.json"), args.tol)
            rows.append((f"first iteration, accel at {precision} vs cpu", name, result))
    for origin in ("cpu", "accel"):
        result = compare_files(os.path.join(root, f"resume_{origin}_on_cpu.json"),
                               os.path.join(root, f"resume_{origin}_on_accel.json"), args.tol)
        rows.append((f"{origin} checkpoint resumed on accel vs on cpu", args.ckpt_config, result))
    with open(os.path.join(args.out, "crosscheck.json"), "w") as f:
        json.dump([{"check": c, "config": n, **r} for c, n, r in rows], f, indent=1)
    with open(os.path.join(args.out, f"first_accel_{args.configs.split(',')[0]}_"
                           f"{args.precisions.split(',')[0]}.json")) as f:
        accel = json.load(f)
    print(f"accel = {accel['platform']} ({accel['device_kind']}), jax {accel['jax']}; "
          f"difference relative to max(1, |cpu value|), tolerance {args.tol:g}")
    print("| check | config | metrics | max difference (metric) | within |")
    print("| --- | --- | --- | --- | --- |")
    for check, name, r in rows:
        print(f"| {check} | {name} | {r['metrics']} | {r['max_diff']:.2e} ({r['worst']}) | "
              f"{'yes' if r['within'] else '**no**'} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)

    def common_flags(p, precision: bool = True) -> None:
        p.add_argument("--override", type=parse_override, action="append", default=[],
                       metavar="KEY=VALUE", help="config override (repeatable)")
        p.add_argument("--expect_platform", default="", help="refuse to run elsewhere (gpu)")
        if precision:
            p.add_argument("--precision", default="default", choices=("default", "high",
                                                                       "highest"))

    t = sub.add_parser("table", help="the speed table")
    common_flags(t)
    t.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    t.add_argument("--sides", default=",".join(DEFAULT_SIDES))
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--iters", type=int, default=20)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--peak_sizes", type=int, nargs="*", default=[])
    t.add_argument("--json", default="")
    f = sub.add_parser("first", help="first-iteration metrics to DIR/first_LABEL_CONFIG_P.json")
    common_flags(f, precision=False)
    f.add_argument("--configs", default="bench_toy,bench_dcgan32")
    f.add_argument("--precisions", default="highest")
    f.add_argument("--label", required=True)
    f.add_argument("--iters", type=int, default=1)
    f.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="compare two first-iteration records")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--tol", type=float, default=1e-5)
    k = sub.add_parser("ckpt", help="train, or resume others' checkpoints, on this platform")
    common_flags(k, precision=False)
    k.add_argument("--phase", choices=("train", "resume"), required=True)
    k.add_argument("--root", required=True)
    k.add_argument("--label", required=True)
    k.add_argument("--config", default="default")
    k.add_argument("--iters", type=int, default=2)
    x = sub.add_parser("crosscheck", help="first-iteration and checkpoint checks, CPU vs accel")
    common_flags(x, precision=False)
    x.add_argument("--configs", default="bench_toy,bench_dcgan32")
    x.add_argument("--precisions", default="highest,default")
    x.add_argument("--ckpt_config", default="default")
    x.add_argument("--tol", type=float, default=1e-5)
    x.add_argument("--out", required=True)
    q = sub.add_parser("quality", help="float32 vs bfloat16 sample quality, trained here")
    common_flags(q)
    q.add_argument("--configs", default="toy_25gaussians,digits")
    q.add_argument("--dtypes", default="float32,bfloat16")
    q.add_argument("--seeds", type=int, default=2)
    q.add_argument("--root", default="/tmp/wgan_gpu_quality")
    q.add_argument("--json", default="")
    args = parser.parse_args(argv)
    if getattr(args, "rounds", 1) < 1 or getattr(args, "iters", 1) < 1 or getattr(
            args, "warmup", 0) < 0:
        parser.error("--rounds and --iters must be >= 1, --warmup >= 0")
    {"table": run_table, "first": run_first, "compare": run_compare, "ckpt": run_ckpt,
     "crosscheck": run_crosscheck, "quality": run_quality}[args.mode](args)


if __name__ == "__main__":
    main()
