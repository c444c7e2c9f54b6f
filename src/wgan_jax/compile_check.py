"""A run compiled for a TPU slice it does not own: memory, FLOPs, communication, a time bound.

`check(config, target)` builds exactly the programs the trainer would run on every chip of
`target` (`wgan_jax.targets`): the train step with all chips on the data axis and the global
batch split over them, "auto" and every other platform choice resolved for a TPU, not this
machine; and the generator's passes at the evaluation's and the progress pictures' batch. It
compiles each with XLA's TPU compiler (libtpu) on this CPU machine and reads back what the
compiler says: HBM per chip, the all-reduces and their bytes (`hlo_stats`, loops counted),
the precision of every product, the compiler's estimated cycles. A program that does not fit
a chip is a `DoesNotFit` (a `UserError`) saying by how much and the largest per-chip batch
the compiler fits. `python -m wgan_jax.compile` prints `format_report`.

The iteration's time bound is max(compute, HBM traffic, all-reduce) from the chip's published
peaks (`targets.CHIPS`): a floor no implementation beats, not a prediction.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import hlo_stats, precision, sampling
from wgan_jax.config import data_shape
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import UserError
from wgan_jax.models import layers
from wgan_jax.runs import abstract_train_state, build_gan
from wgan_jax.state import GAN, apply_generator, create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.targets import Target, devices, per_chip_batch, quiet_native_stderr

__all__ = ["check", "Report", "Program", "DoesNotFit", "model_flops", "largest_batch",
           "compile_step", "format_report", "matmul_passes",
           "time_bound", "generator_batches", "real_spec", "class_frequencies",
           "minimum_allreduce", "lower_step", "memory_of"]

PICTURE_BATCH = 64  #: the trainer's sample grid (1000 points for a toy dataset)
TOY_PICTURE_BATCH = 1000
_OOM = re.compile(r"\(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class DoesNotFit(UserError):
    """A program needs more memory than a chip of the target has (the compiler's refusal)."""

    def __init__(self, message: str, needed: float | None, available: float | None):
        super().__init__(message)
        self.needed = needed
        self.available = available


@dataclasses.dataclass
class Program:
    """What the TPU compiler says of one compiled program (per chip, per call)."""

    name: str
    batch: int  # per chip
    compile_seconds: float
    memory: dict[str, int]  # arguments, outputs, aliased, temporaries, generated_code
    flops: float  # XLA's cost analysis (a loop body counted once)
    bytes_accessed: float  # idem
    allreduce: dict[str, int]  # hlo_stats.allreduce_bytes
    matmuls: dict[str, int]  # "convolution highest f32": count (hlo_stats.matmul_ops)
    estimated_cycles: int

    @property
    def hbm_bytes(self) -> int:
        """The chip memory the program holds at once: arguments, outputs not aliased to
        them, temporaries, generated code."""
        m = self.memory
        return (m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"]
                + m["generated_code"])


@dataclasses.dataclass
class Report:
    """`check`'s answer: the slice, the programs, the step's FLOPs, communication, bound."""

    target: Target
    global_batch: int
    per_chip_batch: int
    n_critic: int
    compute_dtype: str
    matmul_precision: str
    conv_impl: str  # what "auto" resolved to on the TPU
    programs: list[Program]
    flops_per_chip: float  # one generator iteration's network FLOPs (`model_flops`)
    allreduce_minimum: int  # one gradient per update: n_critic critic + one generator
    bound: dict[str, float]  # seconds: compute, hbm, allreduce, iteration (their max)

    @property
    def step(self) -> Program:
        """The train step's program (the first)."""
        return self.programs[0]

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able values (`python -m wgan_jax.compile --json`)."""
        t = self.target
        return {
            "topology": t.topology, "name": t.name, "chips": t.chips, "hosts": t.hosts,
            "chip": t.chip.device_kind, "hbm_per_chip": t.chip.hbm_bytes,
            "global_batch": self.global_batch, "per_chip_batch": self.per_chip_batch,
            "n_critic": self.n_critic,
            "compute_dtype": self.compute_dtype, "matmul_precision": self.matmul_precision,
            "conv_impl": self.conv_impl, "flops_per_chip": self.flops_per_chip,
            "allreduce_minimum": self.allreduce_minimum, "bound": self.bound,
            "programs": [dict(dataclasses.asdict(p), hbm_bytes=p.hbm_bytes)
                         for p in self.programs],
        }


def matmul_passes(compute_dtype: str, matmul_precision: str) -> int:
    """bfloat16 passes a TPU makes per float32 product: 1 ("default", or bfloat16 inputs),
    3 ("high"), 6 ("highest") (XLA's TPU precision levels; docs/accelerators.md)."""
    if compute_dtype == "bfloat16":
        return 1
    return {"default": 1, "high": 3, "highest": 6}[matmul_precision]


def class_frequencies(config: ml_collections.ConfigDict) -> tuple[float, ...]:
    """Equal class frequencies for a class-conditional config's data (() otherwise): the
    step's shapes, without reading the data."""
    classes = num_classes(DataSpec.from_config(config))
    return tuple([1.0 / classes] * classes) if classes else ()


def real_spec(config: ml_collections.ConfigDict, batch: int, sharding: Any) -> Any:
    """The step's `real` input as `ShapeDtypeStruct`s: float32 images `[n_critic, batch,
    ...]` (and int32 labels `[n_critic, batch]` for a class-conditional config)."""
    shape = (config.n_critic, batch, *data_shape(config))
    images = jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)
    if not num_classes(DataSpec.from_config(config)):
        return images
    return images, jax.ShapeDtypeStruct(shape[:2], np.int32, sharding=sharding)


def _compile(name: str, batch: int, lower: Callable[[], Any], hbm: float) -> Program:
    start = time.perf_counter()
    lowered = lower()
    try:
        with quiet_native_stderr():
            compiled = lowered.compile()
    except Exception as error:  # noqa: BLE001 - the compiler's own refusal, read below
        text = str(error)
        if "RESOURCE_EXHAUSTED" not in text:
            raise
        found = _OOM.search(text)
        needed = float(found.group(1)) * _UNITS[found.group(2)] if found else None
        available = float(found.group(3)) * _UNITS[found.group(4)] if found else hbm
        raise DoesNotFit(text.splitlines()[0], needed, available) from None
    seconds = time.perf_counter() - start
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    module = hlo_stats.parse(compiled.as_text())
    matmuls = {" ".join(k): v for k, v in sorted(hlo_stats.matmul_ops(module).items())}
    return Program(
        name=name, batch=batch, compile_seconds=seconds, memory=memory_of(compiled),
        flops=float(cost.get("flops", 0.0)), bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        allreduce=hlo_stats.allreduce_bytes(module), matmuls=matmuls,
        estimated_cycles=hlo_stats.estimated_cycles(module),
    )


def memory_of(compiled: Any) -> dict[str, int]:
    """A compiled program's `memory_analysis()` per device: arguments, outputs, aliased
    (outputs sharing an argument's buffer), temporaries, generated code, in bytes."""
    m = compiled.memory_analysis()
    return {
        "arguments": int(m.argument_size_in_bytes),
        "outputs": int(m.output_size_in_bytes),
        "aliased": int(m.alias_size_in_bytes),
        "temporaries": int(m.temp_size_in_bytes),
        "generated_code": int(m.generated_code_size_in_bytes),
    }


def lower_step(config: ml_collections.ConfigDict, mesh: Any, per_device_batch: int,
               gan: GAN, platform: str, *, unroll_critic: bool = False) -> Any:
    """The trainer's train step over every device of `mesh` at `per_device_batch` examples
    per device, lowered as for `platform` ("auto" impls resolved for it; the step traces at
    the config's precision itself), from abstract inputs: nothing is initialised."""
    step_config = StepConfig.from_config(config, class_frequencies(config))
    with layers.auto_resolved_for(platform):
        state = abstract_train_state(gan, config, mesh)
        real = real_spec(config, per_device_batch * mesh.devices.size,
                         NamedSharding(mesh, P(None, step_config.axis_name)))
        step = make_train_step(step_config, mesh, gan, unroll_critic=unroll_critic)
        return step.lower(state, real)  # type: ignore[attr-defined]  # a jitted function


def compile_step(config: ml_collections.ConfigDict, t: Target, per_chip_batch: int,
                 gan: GAN | None = None, *, unroll_critic: bool = False) -> Program:
    """The train step for `t` at `per_chip_batch` examples per chip, compiled (`DoesNotFit`
    when a chip cannot hold it)."""
    gan = gan or build_gan(config)
    mesh = make_mesh(devices(t))
    return _compile("train step", per_chip_batch,
                    lambda: lower_step(config, mesh, per_chip_batch, gan, "tpu",
                                       unroll_critic=unroll_critic),
                    t.chip.hbm_bytes)


def _compile_generator(config: ml_collections.ConfigDict, t: Target, gan: GAN, name: str,
                       batch: int) -> Program:
    """The generator's inference pass at `batch` latents, on every chip (replicated), as the
    trainer's evaluation and pictures run it (`sampling.jitted_generator`)."""
    mesh = make_mesh(devices(t))
    replicated = NamedSharding(mesh, P())
    use_ema = config.ema_decay > 0

    def lower() -> Any:
        with layers.auto_resolved_for("tpu"), precision.scope(config.matmul_precision):
            state = abstract_train_state(gan, config, mesh)
            z = jax.ShapeDtypeStruct((batch, gan.z_dim), np.float32, sharding=replicated)
            labels = (jax.ShapeDtypeStruct((batch,), np.int32, sharding=replicated)
                      if gan.num_classes else None)
            fn = jax.jit(lambda s, z, y: apply_generator(gan, s, z, use_ema=use_ema, labels=y))
            return fn.lower(state, z, labels)

    return _compile(name, batch, lower, t.chip.hbm_bytes)


def model_flops(config: ml_collections.ConfigDict, per_chip_batch: int,
                *, compiled: bool = False) -> float:
    """One generator iteration's FLOPs on one chip at `per_chip_batch`: the network's own
    (XLA's cost analysis of the step lowered on one CPU device, the critic loop unrolled so
    each of its `n_critic` steps counts, every convolution XLA's own), as the speed benchmark
    counts them (benchmarks/train_step.py). The count is the program's, not the platform's,
    and XLA's CPU backend always answers (a GPU's lowered program reports no cost); `compiled`
    counts the optimised program instead of the lowered one (slow for large models)."""
    config = config.copy_and_resolve_references()
    config.model.conv_impl = "xla"
    mesh = make_mesh(jax.devices("cpu")[:1])
    lowered = lower_step(config, mesh, per_chip_batch, build_gan(config), "cpu",
                         unroll_critic=True)
    cost = lowered.compile().cost_analysis() if compiled else lowered.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        raise RuntimeError("XLA's cost analysis reported no FLOPs for the train step")
    return float(cost["flops"])


def minimum_allreduce(gan: GAN, config: ml_collections.ConfigDict) -> int:
    """The fewest bytes a data-parallel iteration all-reduces: one float32 gradient per
    update (`n_critic` critic gradients and one generator gradient)."""
    state = jax.eval_shape(lambda: create_train_state(gan, data_shape(config), 0, False,
                                                        check=False))

    def nbytes(tree: Any) -> int:
        return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))

    return config.n_critic * nbytes(state.d_params) + nbytes(state.g_params)


def time_bound(t: Target, config: ml_collections.ConfigDict, flops: float,
               hbm_bytes: float, allreduce_bytes: float) -> dict[str, float]:
    """Seconds per iteration no implementation beats on `t`: compute at the chip's peak
    bfloat16 FLOP/s over `matmul_passes`, `hbm_bytes` at its HBM bandwidth, a ring all-reduce
    (2 (n-1)/n of the bytes over all its ICI links); "iteration" is their max."""
    chip, n = t.chip, t.chips
    passes = matmul_passes(config.compute_dtype, config.matmul_precision)
    bound = {
        "compute": flops * passes / chip.peak_bf16_flops,
        "hbm": hbm_bytes / chip.hbm_bytes_per_second,
        "allreduce": 2 * (n - 1) / n * allreduce_bytes / chip.ici_bytes_per_second,
    }
    bound["iteration"] = max(bound.values())
    return bound


def generator_batches(config: ml_collections.ConfigDict) -> list[tuple[str, int]]:
    """The generator passes a run makes besides the step: (name, batch)."""
    toy = config.dataset.startswith("toy:")
    found = [("pictures", TOY_PICTURE_BATCH if toy else PICTURE_BATCH)]
    if config.eval_every > 0:
        found.append(("evaluation", min(sampling.GENERATOR_BATCH, int(config.eval.num_samples))))
    return found


def largest_batch(config: ml_collections.ConfigDict, t: Target, gan: GAN | None = None,
                  *, refused: DoesNotFit | None = None, refused_batch: int = 0,
                  multiple: int = 8) -> int:
    """The largest per-chip batch, a multiple of `multiple`, whose train step the compiler
    fits on a chip of `t`, to within 1/8: memory grows linearly with the batch, so a line
    through two points (`multiple`, and the refused batch's need when a `refused` at
    `refused_batch` is given, else 4 x `multiple`) predicts it, and compiles bracket it (the
    prediction, then 1/8 up or down, then halving the bracket). 0 when not even `multiple`
    fits."""
    gan = gan or build_gan(config)

    def probe(batch: int) -> tuple[bool, float | None]:
        try:
            return True, float(compile_step(config, t, batch, gan).hbm_bytes)
        except DoesNotFit as refusal:
            return False, refusal.needed

    def round_down(batch: float) -> int:
        return max(int(batch) // multiple * multiple, multiple)

    fits, low_bytes = probe(multiple)
    if not fits or low_bytes is None:
        return 0
    capacity = float(t.chip.hbm_bytes)
    high_bytes: float | None
    if refused is not None and refused.needed and refused_batch > multiple:
        high, high_bytes, fail = refused_batch, refused.needed, refused_batch
        capacity = refused.available or capacity
    else:
        high = 4 * multiple
        high_fits, high_bytes = probe(high)
        fail = 0 if high_fits else high
    fit = multiple if fail else high
    slope = max((high_bytes or low_bytes) - low_bytes, 1.0) / (high - multiple)
    guess = round_down(multiple + (capacity - low_bytes) / slope)
    for _ in range(12):  # 12 compiles at most
        if fail and (fail <= fit + multiple or fail <= fit * 1.125):
            break
        if guess <= fit or (fail and guess >= fail):
            guess = round_down(((fit * fail) ** 0.5) if fail else fit * 2)
            if guess <= fit:
                break
        if probe(guess)[0]:
            fit = guess
            guess = round_down(guess * 1.125)
        else:
            fail = guess
            guess = round_down(guess / 1.125)
    return fit


def check(config: ml_collections.ConfigDict, t: Target, *, generators: bool = True) -> Report:
    """Compiles `config`'s run for slice `t` (module docstring); `UserError` in one line for
    a batch that does not split or a program that does not fit (`DoesNotFit`, with the
    largest per-chip batch that does)."""
    batch = per_chip_batch(int(config.global_batch_size), t)
    gan = build_gan(config)
    with layers.auto_resolved_for("tpu"):
        conv_impl = layers.resolve_impl(config.model.conv_impl)
    try:
        step = compile_step(config, t, batch, gan)
    except DoesNotFit as refusal:
        raise _refusal(config, t, gan, batch, refusal) from None
    programs = [step]
    if generators:
        for name, gbatch in generator_batches(config):
            programs.append(_compile_generator(config, t, gan, f"generator ({name})", gbatch))
    flops = model_flops(config, batch)
    bound = time_bound(t, config, flops, step.bytes_accessed, step.allreduce["bytes"])
    return Report(t, int(config.global_batch_size), batch, int(config.n_critic),
                  config.compute_dtype, config.matmul_precision, conv_impl, programs, flops,
                  minimum_allreduce(gan, config), bound)


def _refusal(config: ml_collections.ConfigDict, t: Target, gan: GAN, batch: int,
             refusal: DoesNotFit) -> DoesNotFit:
    """The one line for a step that does not fit: by how much, and the batch that does."""
    if refusal.needed:
        available = refusal.available or t.chip.hbm_bytes
        over = (f"needs {refusal.needed / 2**30:.2f} GiB of temporaries, "
                f"{(refusal.needed - available) / 2**30:.2f} GiB more than the "
                f"{available / 2**30:.2f} GiB the compiler has on a chip")
    else:
        over = f"is refused by the compiler ({refusal})"
    head = (f"config does not fit a {t.chip.device_kind} chip of {t.name} at {batch} examples "
            f"per chip (global_batch_size={config.global_batch_size}): the train step {over}")
    fits = largest_batch(config, t, gan, refused=refusal, refused_batch=batch)
    tail = (f"; the largest per-chip batch that fits is about {fits} "
            f"(global_batch_size={fits * t.chips})" if fits else
            "; not even 8 examples per chip fit")
    return DoesNotFit(head + tail, refusal.needed, refusal.available)


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def format_report(r: Report) -> str:
    """The command's table: one block per slice, one row per program."""
    t, step = r.target, r.step
    ar = step.allreduce
    share = step.hbm_bytes / t.chip.hbm_bytes
    lines = [
        f"topology {t.topology} ({t.name}): {t.chips} chips ({t.chip.device_kind}), {t.hosts} "
        f"host{'s' if t.hosts > 1 else ''}; global batch {r.global_batch}, {r.per_chip_batch} "
        f"per chip; compute_dtype {r.compute_dtype}, matmul_precision {r.matmul_precision}, "
        f"conv_impl {r.conv_impl}",
        "",
        f"{'program':<24} {'batch/chip':>10} {'compile':>8} {'HBM/chip':>12} {'of chip':>8} "
        f"{'arguments':>11} {'outputs':>11} {'temporaries':>12} {'code':>10}",
    ]
    for p in r.programs:
        m = p.memory
        lines.append(
            f"{p.name:<24} {p.batch:>10} {p.compile_seconds:>7.1f}s {_mb(p.hbm_bytes):>12} "
            f"{p.hbm_bytes / t.chip.hbm_bytes:>8.1%} {_mb(m['arguments']):>11} "
            f"{_mb(m['outputs'] - m['aliased']):>11} {_mb(m['temporaries']):>12} "
            f"{_mb(m['generated_code']):>10}")
    ratio = ar["bytes"] / r.allreduce_minimum if r.allreduce_minimum else math.nan
    b = r.bound
    passes = matmul_passes(r.compute_dtype, r.matmul_precision)
    lines += [
        "",
        f"HBM: the step holds {_mb(step.hbm_bytes)} of a chip's "
        f"{t.chip.hbm_bytes / 2**30:.0f} GiB ({share:.1%}).",
        f"FLOPs per chip per generator iteration: {r.flops_per_chip / 1e9:,.2f} GFLOP (the "
        f"network's own, critic loop counted {r.n_critic} times).",
        f"all-reduces per iteration: {ar['ops']}, {_mb(ar['bytes'])} per chip "
        f"({ratio:.3f}x the minimum {_mb(r.allreduce_minimum)}: one gradient per update)"
        + (f"; {ar['unknown_loops']} loop(s) of unknown trip count counted once"
           if ar["unknown_loops"] else "") + ".",
        f"time per iteration >= {b['iteration'] * 1e3:,.2f} ms: compute "
        f"{b['compute'] * 1e3:,.2f} ms ({t.chip.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16 peak"
        f"{f' / {passes} passes' if passes > 1 else ''}), HBM {b['hbm'] * 1e3:,.2f} ms "
        f"({step.bytes_accessed / 2**20:,.0f} MiB at {t.chip.hbm_bytes_per_second / 1e9:,.0f} "
        f"GB/s; loop bodies once), all-reduce {b['allreduce'] * 1e3:,.2f} ms (ring, "
        f"{t.chip.ici_bytes_per_second * 8 / 1e9:,.0f} Gbit/s ICI per chip). Figures: "
        f"{t.chip.source}.",
    ]
    return "\n".join(lines)
