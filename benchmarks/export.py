"""The default run's generator exported for jax alone: its size, and loading and sampling it.

    python benchmarks/export.py [--workdir W] [--iterations 20] [--venv DIR] [--rounds 3]
        [--batches 16,1000] [--json out.json]

Trains the embedded default config for `--iterations` generator iterations (the file's size
and the program do not depend on how long it trained) unless `--workdir` names a trained run,
and writes its generator with `python -m wgan_jax.export` for cpu,cuda,tpu and for cpu alone.
Then, in a virtual environment that holds only this jax, jaxlib and flatbuffers (made and
timed here unless `--venv` names one), a fresh process per round and batch size loads the
file as docs/export.md does and samples: the seconds to import jax, to read and deserialize
the file, the first call (compiling for the CPU, then running) and a second call at the same
batch size, and the whole process's wall time. The table gives the median over `--rounds`.
The machine may be shared: the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOADER = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
from jax import export
t1 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    generator = export.deserialize(bytearray(f.read()))
with open(sys.argv[1] + ".json") as f:
    z_dim = json.load(f)["z_dim"]
t2 = time.perf_counter()
z = jax.random.normal(jax.random.PRNGKey(0), (int(sys.argv[2]), z_dim))
jax.block_until_ready(z)
t3 = time.perf_counter()
jax.block_until_ready(generator.call(z))
t4 = time.perf_counter()
jax.block_until_ready(generator.call(z))
t5 = time.perf_counter()
print(json.dumps({"import_jax": t1 - t0, "deserialize": t2 - t1, "first_call": t4 - t3,
                  "second_call": t5 - t4}))
"""


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args[:4])} ... failed:\n{result.stderr[-3000:]}")
    return result


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="", help="a trained run (default: train one)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--venv", default="", help="a jax-only virtual environment to reuse")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="16,1000")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="wgan_export_bench_")
    try:
        _measure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the run, the files, the environment


def _measure(args: argparse.Namespace, scratch: str) -> None:
    import flatbuffers
    import jax
    import jaxlib

    print(f"load average before: {_load_average()}")
    workdir = args.workdir
    if not workdir:
        workdir = os.path.join(scratch, "default")
        _run([sys.executable, "-m", "wgan_jax.main", f"--workdir={workdir}",
              f"--config.num_iterations={args.iterations}", "--config.sample_every=0",
              "--config.eval_every=0"], cwd=REPO)
    files = {}
    for platforms in ("cpu,cuda,tpu", "cpu"):
        out = os.path.join(scratch, f"generator_{platforms.replace(',', '_')}.jaxexport")
        start = time.perf_counter()
        _run([sys.executable, "-m", "wgan_jax.export", f"--workdir={workdir}", f"--out={out}",
              f"--platforms={platforms}"], cwd=REPO)
        files[platforms] = (out, os.path.getsize(out), time.perf_counter() - start)

    install = None
    python = os.path.join(args.venv, "bin", "python") if args.venv else ""
    if not args.venv:
        venv = os.path.join(scratch, "jax_only")
        python = os.path.join(venv, "bin", "python")
        start = time.perf_counter()
        _run([sys.executable, "-m", "venv", venv])
        _run([python, "-m", "pip", "install", "-q", f"jax=={jax.__version__}",
              f"jaxlib=={jaxlib.__version__}", f"flatbuffers=={flatbuffers.__version__}"])
        install = time.perf_counter() - start
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    rows = {}
    program = files["cpu,cuda,tpu"][0]
    for batch in (int(b) for b in args.batches.split(",")):
        runs = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            result = _run([python, "-c", LOADER, program, str(batch)], env=env)
            times = json.loads(result.stdout.strip().splitlines()[-1])
            times["process"] = time.perf_counter() - start
            runs.append(times)
        rows[batch] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    print(f"\njax {jax.__version__}; run {workdir}")
    print("| file | platforms | size | export (process) |")
    print("|---|---|---|---|")
    for platforms, (out, size, seconds) in files.items():
        print(f"| {os.path.basename(out)} | {platforms} | {size / 1e3:.0f} kB | {seconds:.1f} s |")
    if install is not None:
        print(f"\njax-only virtual environment (venv + pip install jax jaxlib flatbuffers): "
              f"{install:.1f} s")
    print(f"\nload and sample in the jax-only environment (median of {args.rounds}, CPU)")
    print("| batch | import jax | deserialize | first call | second call | whole process |")
    print("|---|---|---|---|---|---|")
    for batch, t in rows.items():
        print(f"| {batch} | {t['import_jax']:.2f} s | {t['deserialize'] * 1e3:.1f} ms | "
              f"{t['first_call']:.2f} s | {t['second_call'] * 1e3:.1f} ms | "
              f"{t['process']:.2f} s |")
    print(f"\nload average after: {_load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": {p: {"bytes": s, "export_s": e} for p, (_, s, e)
                                 in files.items()}, "install_s": install,
                       "load_and_sample": rows}, f, indent=2)


if __name__ == "__main__":
    main()
