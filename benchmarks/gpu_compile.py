"""The train step compiled for NVIDIA H100s that are not here (XLA's GPU compiler on this CPU).

    JAX_PLATFORMS=cpu python benchmarks/gpu_compile.py [--configs default,cifar10_resnet]
        [--gpus 1,8] [--per_gpu_batch 64] [--precisions default,highest] [--hlo_dir DIR]

Needs `jax[cuda12]` (the CUDA PJRT plugin, with `ptxas` from the nvidia-cuda-nvcc wheel), no
GPU and no driver. The script sets JAX_PLATFORMS=cpu itself before importing jax, so JAX runs on
the CPU while the plugin, asked for a topology, gives compile-only H100 devices described by
`H100_SXM` (a `stream_executor.GpuTargetConfigProto`, XLA's
xla/tools/hlo_opt/gpu_specs/h100_sxm.txtpb):

    jax.experimental.topologies.get_topology_desc(
        platform="cuda", topology="1x1x8", target_config=H100_SXM).devices

(`topology` is "<partitions>x<hosts per partition>x<GPUs per host>"). The step is the one
`wgan_jax.compile_check` lowers for a TPU slice (`compile_check.lower_step`): all GPUs on the
data axis (`make_mesh`), the state abstract, "auto" impls resolved for "gpu", at the
config's (or each of `--precisions`') matmul precision, `--per_gpu_batch` examples per GPU.

Prints a markdown table, one row per config, GPU count and precision: lowering and compile
seconds; memory_analysis per GPU (arguments, outputs, temporaries, generated code) and its
share of the H100's memory (`device_memory_size` of the target config, 79.1 GiB); all-reduced
bytes per call (`hlo_stats.allreduce_bytes`) over the minimum (n_critic critic gradients and
one generator gradient); whether the compiled program's cost_analysis gives FLOPs (it gives
None here, and so does the lowered module's), so the FLOPs per GPU of one iteration come from
`compile_check.model_flops` (the step lowered on this CPU, the critic loop unrolled). Then the
products of each compiled program with the precision they carry: `hlo_stats.matmul_ops`
(dots and convolutions) and the cuBLAS/cuDNN custom calls XLA:GPU rewrites them to, with the
operand precision they name and their cuDNN math type (or algorithm).
"""

from __future__ import annotations

import os

os.environ["JAX_PLATFORMS"] = "cpu"  # before jax is imported: the GPUs are compile-only

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import jax  # noqa: E402
from jax.experimental import topologies  # noqa: E402

from wgan_jax import hlo_stats  # noqa: E402
from wgan_jax.compile_check import (  # noqa: E402
    lower_step,
    memory_of,
    minimum_allreduce,
    model_flops,
)
from wgan_jax.config import get_config_schema  # noqa: E402
from wgan_jax.models import layers  # noqa: E402
from wgan_jax.runs import build_gan  # noqa: E402
from wgan_jax.step import make_mesh  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import load_config  # noqa: E402

#: An H100 SXM 80GB, as XLA describes it (xla/tools/hlo_opt/gpu_specs/h100_sxm.txtpb).
H100_SXM = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84978434048
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 minor: 0 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
device_description_str: "NVIDIA H100 80GB HBM3"
"""
H100_BYTES = 84978434048

_CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')
_OPERAND_PRECISION = re.compile(r'"operand_precision":\[([^\]]*)\]')
_ALGORITHM = re.compile(r'"algorithm":"(\w+)"|\balgorithm=(\w+)')
_PRECISION_ATTR = re.compile(r"operand_precision=\{(\w+),")
_MATH_TYPE = re.compile(r'"math_type":"(\w+)"')


def gpu_devices(count: int) -> list:
    """`count` compile-only H100s on one host, from the CUDA plugin's topology."""
    topology = topologies.get_topology_desc(platform="cuda", topology=f"1x1x{count}",
                                            target_config=H100_SXM)
    return list(topology.devices)


def the_config(name: str):
    config = get_config_schema() if name == "default" else load_config(name)
    return config.copy_and_resolve_references()


def gpu_products(text: str) -> Counter:
    """The products in compiled GPU HLO: `hlo_stats.matmul_ops`' dots and convolutions, and
    each cuBLAS/cuDNN custom call, by (op, precision, algorithm)."""
    found: Counter = Counter()
    for (op, prec, dtype), n in hlo_stats.matmul_ops(text).items():
        found[(f"{op} {dtype}", prec, "-")] += n
    for line in text.splitlines():
        target = _CUSTOM_CALL.search(line)
        if not target or not re.search(r"cublas|cudnn|gemm|conv", target.group(1)):
            continue
        prec = _PRECISION_ATTR.search(line) or _OPERAND_PRECISION.search(line)
        prec_name = prec.group(1).replace('"', "").split(",")[0].lower() if prec else "default"
        math = _MATH_TYPE.search(line)
        algorithm = _ALGORITHM.search(line)
        detail = math.group(1) if math else (
            (algorithm.group(1) or algorithm.group(2)) if algorithm else "-")
        found[(target.group(1), prec_name, detail)] += 1
    for line in text.splitlines():  # dots that name an algorithm (e.g. dot_tf32_tf32_f32)
        if re.search(r"\bdot\(", line) and "algorithm=" in line:
            algorithm = re.search(r"\balgorithm=(\w+)", line)
            found[("dot algorithm", "", algorithm.group(1) if algorithm else "?")] += 1
    return found


def compile_case(name: str, gpus: int, per_gpu_batch: int, matmul_precision: str | None,
                 hlo_dir: str | None) -> dict:
    """The config's train step for `gpus` H100s at `per_gpu_batch`, compiled: what XLA says."""
    config = the_config(name)
    config.global_batch_size = per_gpu_batch * gpus
    if matmul_precision:
        config.matmul_precision = matmul_precision
    gan = build_gan(config)
    mesh = make_mesh(gpu_devices(gpus))
    with layers.auto_resolved_for("gpu"):
        conv_impl = layers.resolve_impl(config.model.conv_impl)
    start = time.perf_counter()
    lowered = lower_step(config, mesh, per_gpu_batch, gan, "gpu")
    lower_seconds = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start
    text = compiled.as_text()
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        path = os.path.join(hlo_dir, f"{name}_{gpus}gpu_{config.matmul_precision}.hlo")
        with open(path, "w") as f:
            f.write(text)
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) and cost else cost
    lowered_cost = lowered.cost_analysis()  # None too for these devices
    return {
        "config": name, "gpus": gpus, "per_gpu_batch": per_gpu_batch,
        "device_kind": mesh.devices.flat[0].device_kind,
        "matmul_precision": config.matmul_precision, "compute_dtype": config.compute_dtype,
        "conv_impl": conv_impl, "lower_seconds": lower_seconds,
        "compile_seconds": compile_seconds,
        "memory": memory_of(compiled),
        "cost_analysis": None if cost is None else {k: float(v) for k, v in cost.items()
                                                      if k in ("flops", "bytes accessed")},
        "lowered_cost_analysis": lowered_cost,
        "model_flops": model_flops(config, per_gpu_batch),
        "allreduce": hlo_stats.allreduce_bytes(text),
        "allreduce_minimum": minimum_allreduce(gan, config),
        "products": {" | ".join(k): v for k, v in sorted(gpu_products(text).items())},
    }


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def table(rows: list[dict]) -> str:
    lines = [
        "| config | GPUs | batch/GPU | precision | conv impl | lower s | compile s | "
        "args MiB | outputs MiB | temps MiB | code MiB | of 80 GB | all-reduce MiB | "
        "/ minimum | cost_analysis FLOPs | CPU GFLOP/GPU |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['gpus']} | {r['per_gpu_batch']} | "
                         f"{r['matmul_precision']} | no: {r['error']} |" + " |" * 11)
            continue
        m, ar = r["memory"], r["allreduce"]
        held = m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"] + \
            m["generated_code"]
        ratio = ar["bytes"] / r["allreduce_minimum"] if r["allreduce_minimum"] else float("nan")
        flops = ("None" if r["cost_analysis"] is None
                 else f"{r['cost_analysis'].get('flops', 0.0) / 1e9:,.1f} G")
        lowered = f"{r['model_flops'] / 1e9:,.2f}"
        lines.append(
            f"| {r['config']} | {r['gpus']} | {r['per_gpu_batch']} | {r['matmul_precision']} | "
            f"{r['conv_impl']} | {r['lower_seconds']:.1f} | {r['compile_seconds']:.1f} | "
            f"{_mib(m['arguments'])} | {_mib(m['outputs'])} | {_mib(m['temporaries'])} | "
            f"{_mib(m['generated_code'])} | {held / H100_BYTES:.2%} | {_mib(ar['bytes'])} | "
            f"{ratio:.2f} | {flops} | {lowered} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="default,cifar10_resnet",
                        help="'default' (the schema) or configs/NAME.py names, comma-separated")
    parser.add_argument("--gpus", default="1,8", help="GPU counts, comma-separated")
    parser.add_argument("--per_gpu_batch", type=int, default=64)
    parser.add_argument("--precisions", default="default,highest",
                        help="matmul precisions; those other than the first at 1 GPU only")
    parser.add_argument("--hlo_dir", default="", help="write each compiled module's HLO here")
    parser.add_argument("--json", default="", help="write the rows as JSON lines here")
    args = parser.parse_args()

    print(f"jax {jax.__version__}, platforms {jax.devices()[0].platform}; target: "
          f"{gpu_devices(1)[0].device_kind} (compile-only)")
    precisions = args.precisions.split(",")
    rows = []
    for name in args.configs.split(","):
        cases = [(int(g), precisions[0]) for g in args.gpus.split(",")]
        cases += [(1, p) for p in precisions[1:]]
        for gpus, prec in cases:
            try:
                row = compile_case(name, gpus, args.per_gpu_batch, prec, args.hlo_dir or None)
            except Exception as error:  # noqa: BLE001 - reported in the table
                row = {"config": name, "gpus": gpus, "per_gpu_batch": args.per_gpu_batch,
                       "matmul_precision": prec,
                       "error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(table(rows))
    print()
    print("Products in the compiled programs (op | operand precision | algorithm: count):")
    for r in rows:
        if "products" in r:
            print(f"- {r['config']}, {r['gpus']} GPU, {r['matmul_precision']}: "
                  + "; ".join(f"{k}: {v}" for k, v in r["products"].items()))
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
