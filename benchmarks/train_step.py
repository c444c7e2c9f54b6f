"""Times the project's real train step: one JSON line per run.

    python benchmarks/train_step.py --config configs/bench_dcgan32.py --iters 20 [--json]

Compiles the step, runs warm-up iterations, then times `--iters` iterations, blocking on each
one, and reports the median and minimum seconds per generator iteration, the compile time,
XLA's FLOP count of one iteration, the achieved FLOP/s against the machine's measured matmul
peak, and the host overhead: the time a call takes to return before the device finishes
(dispatch), measured over pipelined calls. The FLOPs are the network's own (`model_flops`):
XLA's cost analysis of the same step with the critic loop unrolled (the analysis counts a
loop body once; the timed step keeps the loop) and every convolution as XLA's own
(`conv_impl="xla"`), so that neither a rewrite's extra or dead work nor the framework changes
the count, which then applies to PyTorch's identical networks too. It is read from the lowered
program (no second compilation, which for the ResNet takes minutes); `--compiled_flops`
compiles it.
Real batches are resident on the devices, so the input pipeline is not timed here (see
benchmarks/input_pipeline.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_ITERS = flags.DEFINE_integer("iters", 20, "Timed iterations.")
_WARMUP = flags.DEFINE_integer("warmup", 3, "Warm-up iterations after compiling.")
_JSON = flags.DEFINE_boolean("json", False, "Only the JSON line.")
_COMPILED_FLOPS = flags.DEFINE_boolean(
    "compiled_flops", False,
    "Count FLOPs on the compiled unrolled step (slow) instead of the lowered one.",
)
_OVERHEAD = flags.DEFINE_boolean(
    "penalty_overhead", False,
    "Also time the same config with penalty='none' and report the ratio (the penalty's cost).",
)


def count_flops(step, *args, compiled: bool = True) -> float:
    """XLA's FLOP count of one call of the jitted `step` (0 when the backend gives none).

    `compiled=False` counts the lowered, unoptimised program instead: no compilation (ten
    times cheaper), and within 0.5% of the compiled count for the bench configs (XLA's
    simplifications remove a few element-wise operations); the tests use it.
    """
    lowered = step.lower(*args)
    cost = lowered.compile().cost_analysis() if compiled else lowered.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", 0.0)) if cost else 0.0


def matmul_peak(sizes: tuple[int, ...] = (512, 1024, 2048), repeats: int = 5, *,
                dtype: str = "float32", precision: str = "default") -> float:
    """The best FLOP/s of a square jitted matmul in `dtype` at matmul `precision` on the
    default device."""
    import jax
    import jax.numpy as jnp

    from wgan_jax import precision as prec

    best = 0.0
    with prec.scope(precision):
        matmul = jax.jit(jnp.matmul)
        for n in sizes:
            a = jnp.ones((n, n), dtype)
            matmul(a, a).block_until_ready()
            for _ in range(repeats):
                t = time.perf_counter()
                matmul(a, a).block_until_ready()
                best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def model_flops(config, compiled: bool = False) -> float:
    """FLOPs of one generator iteration of `config`'s network (module docstring), on one
    device at the config's global batch (`compile_check.model_flops`, which the TPU compile
    check shares); `compiled` counts the optimised program (slow for large models)."""
    from wgan_jax.compile_check import model_flops as network_flops

    return network_flops(config, int(config.global_batch_size), compiled=compiled)


def measure(config, iters: int, warmup: int) -> dict:
    """Compiles and times `config`'s train step on all local devices (`main` adds the FLOPs)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from wgan_jax.config import data_shape
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, make_mesh, make_train_step
    from wgan_jax.train import build_gan, replicate

    mesh = make_mesh()
    shape = data_shape(config)
    gan = build_gan(config)
    state = replicate(create_train_state(gan, shape, config.seed, config.ema_decay > 0), mesh)
    step = make_train_step(StepConfig.from_config(config), mesh, gan)
    rng = np.random.default_rng(0)
    real = jax.device_put(
        rng.uniform(-1, 1, (config.n_critic, config.global_batch_size, *shape)).astype(np.float32),
        NamedSharding(mesh, P(None, "data")),
    )
    t0 = time.perf_counter()
    compiled = step.lower(state, real).compile()
    compile_seconds = time.perf_counter() - t0
    for _ in range(warmup):
        state, metrics = compiled(state, real)
    jax.block_until_ready(state)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        state, metrics = compiled(state, real)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t)
    dispatch = []
    t_all = time.perf_counter()
    for _ in range(iters):
        t = time.perf_counter()
        state, metrics = compiled(state, real)
        dispatch.append(time.perf_counter() - t)
    jax.block_until_ready(state)
    pipelined = (time.perf_counter() - t_all) / iters
    median = statistics.median(times)
    return {
        "config": config.dataset,
        "model": config.model.kind,
        "seconds_per_iteration": median,
        "min": min(times),
        "pipelined_seconds_per_iteration": pipelined,
        "host_overhead_seconds": statistics.median(dispatch),
        "compile_seconds": compile_seconds,
        "devices": mesh.devices.size,
        "platform": jax.devices()[0].platform,
        "global_batch": config.global_batch_size,
        "n_critic": config.n_critic,
        "compute_dtype": config.compute_dtype,
        "conv_impl": config.model.conv_impl,
    }


def main(argv: list[str]) -> None:
    del argv
    config = _CONFIG.value
    result = measure(config, _ITERS.value, _WARMUP.value)
    flops = model_flops(config, _COMPILED_FLOPS.value)  # once: the penalty-free run needs none
    median = result["seconds_per_iteration"]
    result["flops_per_iteration"] = flops
    result["achieved_flops_per_second"] = flops / median if median > 0 else 0.0
    peak = matmul_peak()
    result["matmul_peak_flops_per_second"] = peak
    result["fraction_of_peak"] = result["achieved_flops_per_second"] / peak
    if _OVERHEAD.value:
        plain = config.copy_and_resolve_references()
        plain.penalty = "none"
        without = measure(plain, _ITERS.value, _WARMUP.value)["seconds_per_iteration"]
        result["seconds_per_iteration_without_penalty"] = without
        result["penalty_overhead"] = result["seconds_per_iteration"] / without
    if not _JSON.value:
        print(f"{result['seconds_per_iteration'] * 1e3:.1f} ms/iteration (median of "
              f"{_ITERS.value}), {result['achieved_flops_per_second'] / 1e9:.1f} GFLOP/s "
              f"({100 * result['fraction_of_peak']:.0f}% of the matmul peak)",
              file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
