"""A run on disk, rebuilt: its config, its networks, a restored checkpoint, samples, metrics.

The trainer (to start and to resume) and the commands `sample`, `evaluate` and `diagnose` load
runs through these functions, so a run trained with your own networks (`model.generator`,
`model.critic`) is rebuilt from its `config.json` alone, exactly as the trainer built it.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax import checkpoint as ckpt
from wgan_jax import fs, plots, precision, sampling
from wgan_jax import jacobian_truncation as jt
from wgan_jax.config import data_shape
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import ConfigError, UserError
from wgan_jax.evaluators import EvalSpec, evaluate_state, evaluator_for_data
from wgan_jax.models import build_models
from wgan_jax.run_config import OBJECTS_KEY, load_config_json, read_config_dict
from wgan_jax.state import (
    GAN,
    OptimizerConfig,
    TrainState,
    create_train_state,
    make_optimizers,
)
from wgan_jax.step import make_mesh

__all__ = ["load_run", "Run", "build_gan", "build_networks", "generate_samples",
           "generate_class_samples", "generate_from_latents", "write_samples",
           "write_interpolation", "write_class_grid", "evaluate_run", "iter_samples",
           "block_latents", "parse_checkpoint", "networks_passed_as_objects", "SAMPLE_BLOCK"]

log = logging.getLogger("wgan_jax")


def build_networks(
    config: ml_collections.ConfigDict, generator: Any = None, critic: Any = None
) -> tuple[Any, Any]:
    """(generator, critic): the caller's own objects where given, else those `config` names.

    Giving an object and naming a factory in the config for the same network is refused
    (`ConfigError`): the run's config.json must say which networks were trained.
    """
    for which, given in (("generator", generator), ("critic", critic)):
        if given is not None and config.model[which]:
            raise ConfigError(
                f"config.model.{which}: names {config.model[which]!r} but a {which} object "
                "was passed too; give one of them"
            )
    if generator is None or critic is None:
        config_g, config_c = build_models(config)
        generator = config_g if generator is None else generator
        critic = config_c if critic is None else critic
    return generator, critic


def build_gan(
    config: ml_collections.ConfigDict,
    generator: Any = None,
    critic: Any = None,
    lr_scale: float = 1.0,
) -> GAN:
    """The networks (the caller's, else the config's) with their optimizers."""
    if generator is None or critic is None:
        generator, critic = build_networks(config, generator, critic)
    g_tx, d_tx = make_optimizers(OptimizerConfig.from_config(config), lr_scale)
    return GAN(generator, critic, g_tx, d_tx, config.model.z_dim,
               num_classes(DataSpec.from_config(config)))


def abstract_state(state: Any, mesh) -> Any:
    """Shapes and dtypes of `state` (arrays or `ShapeDtypeStruct`s), replicated on `mesh`.

    Restoring into this places a checkpoint written on any device count on the current mesh.
    """
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)


def abstract_train_state(gan: GAN, config: ml_collections.ConfigDict, mesh) -> Any:
    """The `TrainState` structure on `mesh` without computing it (no init, no compilation)."""
    shape = data_shape(config)
    return abstract_state(
        jax.eval_shape(lambda: create_train_state(gan, shape, config.seed, config.ema_decay > 0,
                                                 check=False)),
        mesh,
    )


def parse_checkpoint(which: str) -> str | int:
    """"latest", "best" or a step number; `ValueError` (saying what is accepted) otherwise."""
    if which in ("latest", "best"):
        return which
    if which.isdigit():
        return int(which)
    raise ValueError(f"must be latest, best or a step number, got {which!r}")


class Run(NamedTuple):
    """A run restored from its workdir: config, networks and optimizers, state, its step."""

    config: ml_collections.ConfigDict
    gan: GAN
    state: TrainState
    step: int


def networks_passed_as_objects(workdir: str) -> list[str]:
    """Which of "generator", "critic" the run in `workdir` was given as objects (its config
    cannot rebuild those: whoever opens the run must pass them again)."""
    saved = read_config_dict(workdir) or {}
    return [w for w in saved.get(OBJECTS_KEY, []) if w in ("generator", "critic")]


def _check_objects_given(workdir: str, generator: Any, critic: Any) -> None:
    given = {"generator": generator is not None, "critic": critic is not None}
    missing = [w for w in networks_passed_as_objects(workdir) if not given[w]]
    if missing:
        which = " and ".join(missing)
        keywords = ", ".join(f"{w}=..." for w in missing)
        raise UserError(
            f"{workdir} was trained with its {which} passed as an object "
            f"(train_and_evaluate({keywords})), which its config.json cannot rebuild: open it "
            f"in Python with runs.load_run(workdir, {keywords}) and the same networks, or train "
            f"with factories named by config.model.{missing[0]} to use the commands")


def load_run(workdir: str, checkpoint: str = "latest", *, generator: Any = None,
             critic: Any = None) -> Run:
    """Restores `workdir`'s checkpoint (latest, best or a step) on the local devices.

    `generator` and `critic`: the networks the run was trained with when they were passed to
    `train_and_evaluate` as objects (the run's config.json names which; without them this
    raises `UserError` saying so). Their weights come from the checkpoint, not from them.
    Read-only: a trainer may be writing this workdir right now.
    """
    if not fs.isdir(workdir):
        raise UserError(f"workdir {workdir!r} does not exist")
    try:
        which = parse_checkpoint(checkpoint)
    except ValueError as error:
        raise UserError(f"checkpoint {error}") from None
    _check_objects_given(workdir, generator, critic)
    config = load_config_json(workdir)
    gan = build_gan(config, generator, critic)
    mesh = make_mesh()
    checkpointer = ckpt.Checkpointer(workdir, best_metric=config.eval.metric, read_only=True)
    try:
        if which == "best":
            best = checkpointer.best()
            if best is None:
                raise UserError(f"{workdir} has no best checkpoint (evaluation was off)")
            step = int(best["step"])
        elif which == "latest":
            step = None
        else:
            step = int(which)
            if step not in checkpointer.all_steps():
                raise UserError(f"no checkpoint {step} in {checkpointer.directory}; "
                                f"have {checkpointer.all_steps()}")
        restored = checkpointer.restore(abstract_train_state(gan, config, mesh), step)
    finally:
        checkpointer.close()
    if restored is None:
        raise UserError(f"no checkpoint in {checkpointer.directory}")
    state, _, step = restored
    return Run(config, gan, state, int(step))


#: `sample` draws latents and generates in blocks of this many samples: memory stays bounded
#: for any N, and the first N samples of a larger N are the same samples.
SAMPLE_BLOCK = 1000
# `sample --out FILE.png`: at most this many samples in one picture.
PNG_MAX_IMAGES = 4096  # an image grid (64 x 64 tiles)
PNG_MAX_POINTS = 100_000  # a scatter plot of 2-D samples
SAMPLE_FORMATS = (".npy", ".png")


def block_latents(seed: int, block: int, rows: int, z_dim: int,
                  truncation: float | None = None) -> Any:
    """The latents [rows, z_dim] of block `block` of a `sample` draw with `seed`: N(0, I)
    (or truncated at +-psi `truncation`) from `PRNGKey(seed)` for block 0, from
    `fold_in(PRNGKey(seed), block)` after it. Block 0 of `rows` <= `SAMPLE_BLOCK` samples is
    exactly `jax.random.normal(PRNGKey(seed), (rows, z_dim))`, the draw of earlier versions."""
    key = jax.random.PRNGKey(seed)
    if block:
        key = jax.random.fold_in(key, block)
    if truncation is not None:
        return sampling.truncated_normal_latents(key, rows, z_dim, truncation)
    return jax.random.normal(key, (rows, z_dim))


def iter_samples(
    gan: GAN, state: TrainState, num: int, seed: int, use_ema: bool = False,
    truncation: float | None = None, labels: list[int] | None = None,
    block: int = SAMPLE_BLOCK, matmul_precision: str = "default",
    jacobian_truncation: float = 0.0,
) -> Any:
    """Yields the float32 samples of `generate_samples` (or, with `labels`, of
    `generate_class_samples`) block after block, at most `block` at a time, so that a large
    `num` never holds more than one block in memory. Every block is generated at the full
    `block` size (the last one padded and cut), so the generator compiles once. The generator
    runs at `matmul_precision` (the run's `config.matmul_precision`, see `wgan_jax.precision`).
    `jacobian_truncation` > 0 (unconditional runs): each block keeps the smoothest of a larger
    draw of latents (`wgan_jax.jacobian_truncation`)."""
    _check_ema(state, use_ema)
    for label in ([None] if labels is None else labels):
        for k, first in enumerate(range(0, num, block)):
            rows = min(block, num - first)
            if jacobian_truncation:
                with precision.scope(matmul_precision):
                    z = block_latents(seed, k, jt.num_candidates(rows, jacobian_truncation),
                                      gan.z_dim, truncation)
                    z = jt.smoothest_latents(gan, state, z, rows, use_ema)
            else:
                z = block_latents(seed, k, rows, gan.z_dim, truncation)
            if rows < block and first > 0:
                z = jnp.concatenate([z, jnp.zeros((block - rows, gan.z_dim), z.dtype)])
            y = None
            if label is not None:
                y = np.full((len(z),), label, np.int32)
            elif gan.num_classes:
                y = (np.arange(first, first + len(z)) % gan.num_classes).astype(np.int32)
            with precision.scope(matmul_precision):
                samples = sampling.generate_from_latents(gan, state, z, use_ema, y)
            yield samples[:rows]


def generate_samples(
    gan: GAN, state: TrainState, num: int, seed: int, use_ema: bool = False,
    truncation: float | None = None, matmul_precision: str = "default",
) -> np.ndarray:
    """`num` samples as float32 numpy, from latents drawn with `seed` in blocks of
    `SAMPLE_BLOCK` (`block_latents`): the first N samples of a larger `num` are the same.

    `truncation` psi > 0 redraws latent coordinates beyond +-psi
    (`sampling.truncated_normal_latents`); None draws plain N(0, I) latents. `use_ema` asks
    for the EMA generator; a run that kept none raises `UserError`. All in memory: for a large
    `num` use `write_samples`, which streams to a file.
    """
    return np.concatenate(list(iter_samples(gan, state, num, seed, use_ema, truncation,
                                            matmul_precision=matmul_precision)))


def check_sample_out(path: str, num: int, *, toy: bool | None = None,
                     per_class: int = 1) -> str:
    """The format (".npy" or ".png") `sample` writes to `path`; `UserError` naming `path` when
    that cannot be written: another suffix, a directory, a parent that is no directory or
    cannot be written in, or more samples than one picture holds (`toy`: 2-D samples; None:
    not known yet). A local directory is probed by creating (and removing) a file in it."""
    if not fs.is_remote(path) and os.path.isdir(path):
        raise UserError(f"--out {path} is a directory; name a file in it, e.g. "
                        f"{os.path.join(path, 'samples.npy')}")
    extension = os.path.splitext(path)[1].lower()
    if extension not in SAMPLE_FORMATS:
        raise UserError(f"--out {path!r}: sample writes .npy (the samples as an array) or .png "
                        "(a picture of them), not " + (repr(extension) if extension else
                                                        "a file without a suffix"))
    if extension == ".png" and toy is not None:
        limit = PNG_MAX_POINTS if toy else PNG_MAX_IMAGES
        if num * per_class > limit:
            raise UserError(f"--out {path!r}: a .png holds at most {limit} samples, asked for "
                            f"{num * per_class}; write .npy for more")
    fs.check_writable_file(path, "--out")
    return extension


def write_samples(
    run: Run, path: str, num: int, seed: int, use_ema: bool = False,
    truncation: float | None = None, labels: list[int] | None = None,
    progress: Any = None, block: int = SAMPLE_BLOCK, jacobian_truncation: float = 0.0,
) -> tuple[int, ...]:
    """Writes `num` samples (of each class in `labels`) of `run` to `path`; their shape.

    `.npy`: streamed block after block into a temporary file that replaces `path` once
    complete (memory bounded by one block; `progress(done, total)` after each block).
    `.png`: an image grid (one class per row with `labels`), or for 2-D toy samples a scatter
    plot. `UserError` (before anything is written) for a path `check_sample_out` refuses, for
    `jacobian_truncation` (see `iter_samples`) outside [0, 1) or with a conditional run, and
    when writing fails (e.g. the disk is full; the partial file is removed).
    """
    if jacobian_truncation:
        try:
            jt.check_fraction(jacobian_truncation)
        except ValueError as error:
            raise UserError(f"--jacobian_truncation {error}") from None
        if run.gan.num_classes:
            raise UserError("--jacobian_truncation is for unconditional runs; this run is "
                            "conditional")
    toy = len(data_shape(run.config)) == 1
    per_class = 1 if labels is None else len(labels)
    if labels is not None:
        check_labels(run.gan, labels)
    extension = check_sample_out(path, num, toy=toy, per_class=per_class)
    blocks = iter_samples(run.gan, run.state, num, seed, use_ema, truncation, labels, block,
                          run.config.matmul_precision, jacobian_truncation)
    total = num * per_class
    if extension == ".png":
        samples = np.concatenate(list(blocks))
        try:
            if toy:
                plots.save_scatter(path, samples, title=f"{total} samples")
            else:
                plots.save_image_grid(path, np.clip(samples, -1, 1),
                                      ncols=num if labels is not None else None)
        except OSError as error:
            raise UserError(f"cannot write --out {path}: {error}") from None
        return samples.shape
    first = next(blocks)
    shape = (total, *first.shape[1:])
    fs.check_free_space(path, total * first[0].nbytes, "--out")
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
              "fortran_order": False, "shape": shape}
    done = 0
    try:
        with fs.atomic_writer(path) as f:
            np.lib.format.write_array_header_1_0(f, header)
            for part in _chain(first, blocks):
                f.write(np.ascontiguousarray(part, np.float32).tobytes())
                done += len(part)
                if progress is not None:
                    progress(done, total)
    except OSError as error:
        raise UserError(f"cannot write --out {path}: {error} (nothing was written)") from None
    return shape


def _chain(first: Any, rest: Any) -> Any:
    yield first
    yield from rest


def generate_from_latents(
    gan: GAN, state: TrainState, z: Any, use_ema: bool = False
) -> np.ndarray:
    """The generator's float32 outputs for the latents `z` [N, z_dim] (the EMA weights with
    `use_ema`; a run that kept none raises `UserError`)."""
    _check_ema(state, use_ema)
    return sampling.generate_from_latents(gan, state, z, use_ema)


def _check_ema(state: TrainState, use_ema: bool) -> None:
    if use_ema and state.ema_params is None:
        raise UserError("this run kept no EMA generator weights (config.ema_decay was 0)")


INTERPOLATION_FORMATS = (".png", ".gif")


def write_interpolation(
    run: Run, path: str, steps: int, seed: int, *, rows: int = 4,
    truncation: float | None = None, use_ema: bool = False,
) -> tuple[int, ...]:
    """Writes `rows` spherical interpolations of `steps` images each to `path`; their shape.

    Each row joins two latents drawn with `seed` (truncated at psi `truncation` when given,
    see `sampling.interpolation_latents`). A `.png` path gets a grid, a row per interpolation;
    a `.gif` path an animation of `steps` frames. Another extension, a toy (2-D) run or fewer
    than 2 steps raise `UserError` before anything is written.
    """
    extension = os.path.splitext(path)[1].lower()
    if extension not in INTERPOLATION_FORMATS:
        raise UserError(f"an interpolation is written as .png or .gif, not {path!r}")
    shape = data_shape(run.config)
    if len(shape) != 3:
        raise UserError(f"{run.config.dataset} is not image data: an interpolation needs images")
    z = sampling.interpolation_latents(seed, steps, run.gan.z_dim, rows=rows, psi=truncation)
    images = generate_from_latents(run.gan, run.state, z.reshape(rows * steps, -1), use_ema)
    images = images.reshape(rows, steps, *images.shape[1:])
    if extension == ".png":
        sampling.save_interpolation_png(path, images)
    else:
        sampling.save_interpolation_gif(path, images)
    return images.shape


def generate_class_samples(
    gan: GAN, state: TrainState, num: int, seed: int, labels: list[int], use_ema: bool = False,
    matmul_precision: str = "default",
) -> np.ndarray:
    """`num` samples of each class in `labels`, class after class (`[len(labels) * num, ...]`);
    every class gets the same `num` latents drawn with `seed`, so row k of a grid with `num`
    columns is class `labels[k]`. `UserError` for an unconditional run or an unknown class.
    The generator runs at `matmul_precision` (the run's `config.matmul_precision`).
    """
    check_labels(gan, labels)
    return np.concatenate(list(iter_samples(gan, state, num, seed, use_ema, labels=labels,
                                            matmul_precision=matmul_precision)))


def check_labels(gan: GAN, labels: list[int]) -> None:
    """`UserError` unless `gan` is class-conditional and has every class in `labels`."""
    if not gan.num_classes:
        raise UserError("this run is not class-conditional (config.model.conditional='none')")
    bad = [k for k in labels if not 0 <= k < gan.num_classes]
    if bad:
        raise UserError(f"class {bad[0]} is not one of this run's classes "
                        f"0..{gan.num_classes - 1}")


def write_class_grid(
    run: Run, path: str, labels: list[int], num: int, seed: int, use_ema: bool = False
) -> tuple[int, ...]:
    """Writes a PNG grid of `num` samples of each class in `labels`, one class per row
    (`generate_class_samples`: the same latents in every row); the samples' shape.
    `UserError` for an unconditional run or an unknown class, before anything is written."""
    samples = generate_class_samples(run.gan, run.state, num, seed, labels, use_ema,
                                     run.config.matmul_precision)
    plots.save_image_grid(path, samples, ncols=num)
    return samples.shape


def evaluate_run(workdir: str, checkpoint: str = "latest", num: int | None = None,
                 seed: int = 0, *, generator: Any = None, critic: Any = None) -> dict[str, Any]:
    """The sample-quality metrics of one checkpoint of `workdir`, with the settings used
    (`generator`, `critic`: as for `load_run`)."""
    config, gan, state, step = load_run(workdir, checkpoint, generator=generator, critic=critic)
    if num is not None:
        config.eval.num_samples = num
    spec = EvalSpec.from_config(config)
    evaluator = evaluator_for_data(spec, seed=seed)
    if evaluator is None:
        raise UserError(
            f"no metrics apply to {config.dataset} without config.eval.inception_weights"
        )
    metrics = evaluate_state(spec, gan, state, seed=seed, evaluator=evaluator)
    return {
        "workdir": workdir,
        "step": step,
        "checkpoint": checkpoint,
        "dataset": config.dataset,
        "num_samples": int(config.eval.num_samples),
        "ema": bool(config.ema_decay > 0 and state.ema_params is not None),
        "metrics": {k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()},
    }
