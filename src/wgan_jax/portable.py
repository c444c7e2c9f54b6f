"""A trained generator as one portable file: a `jax.export` program that `jax` alone loads.

`export_generator(run)` serializes the generator of a loaded run (`runs.load_run`) as a
versioned StableHLO program (`jax.export`): its weights inside as constants, BatchNorm in
inference mode (running statistics, the same `state.apply_generator(..., train=False)` that
`sample` runs), a symbolic batch dimension, lowered for several platforms at once. Its
calling convention is `program.call(z)`, `z: float32[batch, z_dim]` the latents, or
`program.call(z, labels)` with `labels: int32[batch]` for a class-conditional run; it returns
float32 samples `[batch, ...]`. Loading and calling it needs `jax` (and `flatbuffers`, which
`jax.export.deserialize` imports), not wgan_jax, flax, optax or orbax (docs/export.md;
`tests/test_export_cli.py` does it in a fresh virtual environment holding only those).
`PortableGenerator.write(path)` writes the program and, beside it at `path + ".json"`, what a
caller needs to know (`metadata_path`): the latent size, the output's shape and range, the
classes, the run's config digest and checkpoint step, the platforms, the jax version.

What the program computes is what `sample` computes, bit for bit on CPU for the same latents
(`tests/test_portable.py`, `tests/test_export_cli.py`):

* It is traced at the run's `config.matmul_precision` (`precision.scope`).
* The weights are constants that XLA cannot see as constants. `sample`'s jitted generator
  takes them as arguments; given constants, XLA:CPU compiles other arithmetic (it specializes
  on their values and hands the products constant weights) and rounds differently: up to
  9e-8 apart on the default run, and still apart behind `lax.optimization_barrier`, which
  XLA removes before it simplifies. So each weight is a runtime `lax.dynamic_slice` of its
  constant padded by one element, at an offset computed from the latents that is always
  negative: the slice's start is clamped to 0 (its StableHLO semantics), so it is the weight
  exactly, for every input, and XLA compiles what `sample` runs.
* A convolution impl of "auto" (`model.conv_impl`, `models.layers`) is resolved for each
  target platform, not for the machine that exports: the program holds one variant per
  distinct trace ("matmul" on CPU, "s2d" on GPUs, "xla" on TPUs for the built-in DCGANs), chosen
  when it is compiled (`jax.lax.platform_dependent`). On each platform the program computes
  what `sample` computes there.

Latents are the caller's: `sample --seed S --num N` (N <= `runs.SAMPLE_BLOCK`) draws
`jax.random.normal(jax.random.PRNGKey(S), (N, z_dim))`, and `--truncation PSI`
`jax.random.truncated_normal(key, -PSI, PSI, (N, z_dim))`, which a loader draws the same way.
Jacobian truncation (`config.sampling.jacobian_truncation`) chooses latents by the
generator's Jacobian, which a latents-to-samples program cannot do: the program is the plain
generator, and the metadata says that the run's setting is not applied (so does `export`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import export, lax

from wgan_jax import __version__, fs, precision
from wgan_jax.config import data_shape
from wgan_jax.errors import UserError
from wgan_jax.models import layers
from wgan_jax.runs import Run
from wgan_jax.state import GAN, apply_generator

__all__ = [
    "DEFAULT_PLATFORMS",
    "FORMAT",
    "PLATFORMS",
    "PortableGenerator",
    "config_digest",
    "export_generator",
    "metadata_path",
    "parse_platforms",
]

# The platforms `jax.export` lowers for (its names), and the impl key `models.layers` resolves
# "auto" with on each (`jax.default_backend()`'s name there).
_BACKENDS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
#: The platforms `export_generator` can lower for (`jax.export`'s names).
PLATFORMS: tuple[str, ...] = tuple(_BACKENDS)
#: The platforms a file holds unless told otherwise (`export --platforms`).
DEFAULT_PLATFORMS: tuple[str, ...] = ("cpu", "cuda", "tpu")
#: The metadata's "format": the version of its layout.
FORMAT = "wgan_jax.portable_generator/1"
_BATCH = "batch"  # the symbolic batch dimension's name

Weights = tuple[Any, Any]  # (generator params, generator state), host arrays


@dataclasses.dataclass(frozen=True)
class PortableGenerator:
    """A serialized generator program (`program`, the bytes of `jax.export.Exported.serialize`)
    and what a caller needs to know about it (`metadata`, JSON-ready)."""

    program: bytes
    metadata: dict[str, Any]

    def write(self, path: str) -> None:
        """Writes `program` to `path` and `metadata` to `metadata_path(path)`, each replaced
        only when both are complete; `UserError` naming `path` (nothing written) when that
        fails, e.g. on a full disk. `path` may be a URL (`fs`)."""
        text = json.dumps(self.metadata, indent=2) + "\n"
        fs.check_free_space(path, len(self.program) + len(text), "export")
        try:
            with fs.atomic_writer(path) as program, \
                    fs.atomic_writer(metadata_path(path)) as metadata:
                program.write(self.program)
                metadata.write(text.encode("utf-8"))
        except OSError as error:
            raise UserError(f"cannot write {path}: {error} (nothing was written)") from None


def metadata_path(path: str) -> str:
    """Where the metadata of the program at `path` is written: `path + ".json"`."""
    return path + ".json"


def parse_platforms(text: str) -> tuple[str, ...]:
    """The platforms of a comma-separated list ("cpu,cuda,tpu"), in order, each once;
    `ValueError` naming an unknown one and listing `PLATFORMS`."""
    names = [name.strip() for name in text.split(",")]
    return _checked_platforms(names)


def _checked_platforms(names: Sequence[str]) -> tuple[str, ...]:
    accepted = ", ".join(PLATFORMS)
    if isinstance(names, str) or not names:
        raise ValueError(f"must name one or more of {accepted}, got {names!r}")
    for name in names:
        if name not in _BACKENDS:
            raise ValueError(f"{name!r} is not a platform jax.export lowers for; "
                             f"expected one or more of {accepted}")
    return tuple(dict.fromkeys(names))


def config_digest(config: ml_collections.ConfigDict) -> str:
    """The sha256 (hex) of `config` as canonical JSON (sorted keys, no spaces): the same for
    the same run's config (`runs.load_config_json`), whichever file it was read from."""
    canonical = json.dumps(json.loads(config.to_json_best_effort()), sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def export_generator(
    run: Run, *, use_ema: bool = False, platforms: Sequence[str] = DEFAULT_PLATFORMS,
    batch: int | None = None,
) -> PortableGenerator:
    """`run`'s generator (the EMA weights with `use_ema`) as a `jax.export` program for
    `platforms` (names of `PLATFORMS`), with a symbolic batch dimension or, with `batch`, a
    fixed one; see the module docstring for what it computes and takes.

    `UserError` for an unknown platform, `use_ema` on a run that kept no EMA weights, a
    `batch` < 1, and a generator that cannot be traced with a symbolic batch (it then says to
    give `batch`).
    """
    try:
        platforms = _checked_platforms(platforms)
    except ValueError as error:
        raise UserError(f"platforms: {error}") from None
    if batch is not None and batch < 1:
        raise UserError(f"batch must be >= 1, got {batch}")
    state = run.state
    if use_ema and state.ema_params is None:
        raise UserError("this run kept no EMA generator weights (config.ema_decay was 0)")
    gan = run.gan
    weights = jax.device_get((state.ema_params if use_ema else state.g_params, state.g_state))
    size = export.symbolic_shape(_BATCH)[0] if batch is None else batch
    specs = [jax.ShapeDtypeStruct((size, gan.z_dim), jnp.float32)]
    if gan.num_classes:
        specs.append(jax.ShapeDtypeStruct((size,), jnp.int32))
    with precision.scope(run.config.matmul_precision):
        program, variants = _program(gan, state, weights, platforms, len(specs), batch or 2)
        try:
            exported = export.export(jax.jit(program), platforms=platforms)(*specs)
        except Exception as error:  # noqa: BLE001 - the network's own tracing failed
            if batch is not None:
                raise
            raise UserError(
                "the generator cannot be exported with a symbolic batch size "
                f"({_first_line(error)}); export a fixed one with batch=N (export --batch N)"
            ) from None
    serialized = bytes(exported.serialize())
    metadata = _metadata(run, use_ema, platforms, variants, batch, exported, serialized)
    return PortableGenerator(serialized, metadata)


def _program(
    gan: GAN, state: Any, weights: Weights, platforms: tuple[str, ...], arity: int,
    example_batch: int,
) -> tuple[Callable[..., jax.Array], list[list[str]]]:
    """The function to export, and the platforms grouped by the program they get.

    Each platform's variant is the generator traced with "auto" convolutions resolved for it;
    platforms whose traces (at `example_batch`) are identical share one variant, and a single
    variant is exported without a platform switch.
    """
    bare = state.replace(g_params=None, g_state=None, d_params=None, d_state=None,
                         g_opt_state=None, d_opt_state=None, ema_params=None)

    def variant(platform: str) -> Callable[..., jax.Array]:
        def generate(weights: Weights, z: jax.Array, labels: jax.Array | None) -> jax.Array:
            params, g_state = weights
            with layers.auto_resolved_for(_BACKENDS[platform]):
                out = apply_generator(gan, bare.replace(g_params=params, g_state=g_state), z,
                                      labels=labels)
            return out.astype(jnp.float32)

        return generate

    example = (jax.ShapeDtypeStruct((example_batch, gan.z_dim), jnp.float32),
               jax.ShapeDtypeStruct((example_batch,), jnp.int32) if arity == 2 else None)
    by_trace: dict[str, Callable[..., jax.Array]] = {}
    groups: dict[str, list[str]] = {}
    chosen: dict[str, Callable[..., jax.Array]] = {}
    for platform in platforms:
        fn = variant(platform)
        trace = str(jax.make_jaxpr(fn)(weights, *example))
        chosen[platform] = by_trace.setdefault(trace, fn)
        groups.setdefault(trace, []).append(platform)
    only = next(iter(by_trace.values())) if len(by_trace) == 1 else None

    runtime_weights = _runtime_weights(weights)

    def program(z: jax.Array, labels: jax.Array | None = None) -> jax.Array:
        held = runtime_weights(z)
        if only is not None:
            return only(held, z, labels)
        return lax.platform_dependent(held, z, labels, **chosen)

    if arity == 2:
        return program, list(groups.values())
    return (lambda z: program(z)), list(groups.values())


def _runtime_weights(weights: Weights) -> Callable[[jax.Array], Weights]:
    """`fn(z)`: the arrays of `weights` as values XLA cannot constant-fold (module docstring):
    each a `dynamic_slice` of its constant, flattened and padded by one element, at an offset
    in [-2**31, -1] computed from the bits of `z[0, 0]`, which StableHLO clamps to 0. Exactly
    the weights, for every `z`."""
    leaves, tree = jax.tree.flatten(weights)
    shapes = [np.shape(leaf) for leaf in leaves]
    flat = [np.concatenate([np.ravel(leaf), np.zeros(1, np.asarray(leaf).dtype)])
            for leaf in leaves]

    def at_runtime(z: jax.Array) -> Weights:
        bits = lax.bitcast_convert_type(z[0, 0].astype(jnp.float32), jnp.uint32) >> 1
        start = -lax.convert_element_type(bits, jnp.int32) - 1  # always < 0: clamped to 0
        return jax.tree.unflatten(tree, [
            lax.dynamic_slice(values, (start,), (values.size - 1,)).reshape(shape)
            for values, shape in zip(flat, shapes, strict=True)])

    return at_runtime


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.splitlines()[0].split())


def _conv_impls(config: ml_collections.ConfigDict, platforms: tuple[str, ...]) -> Any:
    """The convolution impl of each platform's variant for the built-in conv networks, else
    None (an MLP or your own networks)."""
    if config.model.generator or config.model.kind not in ("dcgan", "resnet"):
        return None
    impl = config.model.conv_impl
    return {p: layers.auto_impl(_BACKENDS[p]) if impl == "auto" else impl for p in platforms}


def _metadata(
    run: Run, use_ema: bool, platforms: tuple[str, ...], variants: list[list[str]],
    batch: int | None, exported: Any, program: bytes,
) -> dict[str, Any]:
    config, gan = run.config, run.gan
    shape = data_shape(config)
    image = len(shape) == 3
    size: str | int = _BATCH if batch is None else batch
    inputs = [{"name": "z", "shape": [size, gan.z_dim], "dtype": "float32",
               "about": "latents; training drew them from N(0, I)"}]
    if gan.num_classes:
        inputs.append({"name": "labels", "shape": [size], "dtype": "int32",
                       "about": f"the class of each sample, 0..{gan.num_classes - 1}"})
    call = "call(z, labels)" if gan.num_classes else "call(z)"
    jacobian = float(config.sampling.jacobian_truncation)
    return {
        "format": FORMAT,
        "call": f"jax.export.deserialize(bytearray(open(FILE, 'rb').read())).{call}",
        "inputs": inputs,
        "output": {
            "shape": [size, *shape], "dtype": "float32",
            "range": [-1.0, 1.0] if image else None,
            "about": ("images, NHWC; training scaled the data to [-1, 1]" if image
                      else "2-D points in the data's coordinates (unbounded)"),
        },
        "z_dim": int(gan.z_dim),
        "num_classes": int(gan.num_classes),
        "batch": "symbolic" if batch is None else batch,
        "dataset": config.dataset,
        "checkpoint_step": int(run.step),
        "ema": bool(use_ema),
        "config_sha256": config_digest(config),
        "matmul_precision": config.matmul_precision,
        "compute_dtype": config.compute_dtype,
        "conv_impl": _conv_impls(config, platforms),
        "platforms": list(platforms),
        "platform_variants": variants,
        "jacobian_truncation": {
            "run": jacobian, "in_program": False,
            "about": ("the run samples with config.sampling.jacobian_truncation; the program "
                      "is the plain generator: drop latents yourself" if jacobian else
                      "off in the run"),
        },
        "jax_version": jax.__version__,
        "wgan_jax_version": __version__,
        "calling_convention_version": int(exported.calling_convention_version),
        "program_bytes": len(program),
        "program_sha256": hashlib.sha256(program).hexdigest(),
    }
