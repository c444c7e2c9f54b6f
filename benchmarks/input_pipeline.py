"""Images per second the input pipeline delivers vs. what the train step consumes.

    python benchmarks/input_pipeline.py [--iterations 20] [--steps 4]

Cases: `digits` at 32x32x1 and a 64x64 RGBA `folder:` of generated PNG sprites (converted once;
the conversion time is printed). "pipeline" = global batches built and placed on the devices
(`next(iterator)`, blocked until ready); "train step" = real images the jitted step consumes
(n_critic x global batch per generator iteration) with the config's DCGAN, after compilation.
Prints a Markdown table. The pipeline keeps up when its rate exceeds the step's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax
import numpy as np
from PIL import Image

from wgan_jax.config import data_shape, get_config_schema
from wgan_jax.data.spec import DataSpec
from wgan_jax.input_pipeline import create_input_pipeline
from wgan_jax.state import create_train_state
from wgan_jax.step import StepConfig, make_mesh, make_train_step
from wgan_jax.train import build_gan, replicate


def _sprites(root: str, n: int) -> None:
    rng = np.random.default_rng(0)
    os.makedirs(root, exist_ok=True)
    yy, xx = np.mgrid[:64, :64]
    for i in range(n):
        cx, cy, r = rng.integers(16, 48, 2).tolist() + [int(rng.integers(6, 16))]
        alpha = (((xx - cx) ** 2 + (yy - cy) ** 2) < r * r).astype(np.uint8) * 255
        rgb = np.broadcast_to(rng.integers(0, 256, 3, dtype=np.uint8), (64, 64, 3))
        Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(os.path.join(root, f"s{i:05d}.png"))


def _config(dataset: str, size: int, channels: int, data_dir: str):
    c = get_config_schema()
    c.dataset, c.image_size, c.num_channels, c.data_dir = dataset, size, channels, data_dir
    c.model.kind, c.model.width, c.model.z_dim = "dcgan", 64, 128
    c.model.generator_norm, c.penalty_weight = "batch", 10.0
    c.global_batch_size, c.n_critic = 64, 5
    c.diagnostics.level = "off"
    return c


def pipeline_rate(config, iterations: int) -> float:
    it = create_input_pipeline(DataSpec.from_config(config), make_mesh())
    next(it).block_until_ready()  # reader threads started, caches warm
    start = time.perf_counter()
    for _ in range(iterations):
        next(it).block_until_ready()
    elapsed = time.perf_counter() - start
    it.close()
    return iterations * config.n_critic * config.global_batch_size / elapsed


def step_rate(config, steps: int) -> float:
    mesh = make_mesh()
    shape = data_shape(config)
    gan = build_gan(config)
    state = replicate(create_train_state(gan, shape, config.seed, False), mesh)
    step = make_train_step(StepConfig.from_config(config), mesh, gan)
    it = create_input_pipeline(DataSpec.from_config(config), make_mesh())
    batches = [next(it) for _ in range(steps + 1)]
    state, metrics = step(state, batches[0])
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for batch in batches[1:]:
        state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    elapsed = time.perf_counter() - start
    return steps * config.n_critic * config.global_batch_size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sprites", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _sprites(os.path.join(tmp, "sprites"), args.sprites)
        folder = _config(f"folder:{tmp}/sprites", 64, 4, os.path.join(tmp, "data"))
        start = time.perf_counter()
        create_input_pipeline(DataSpec.from_config(folder), make_mesh()).close()
        convert = time.perf_counter() - start
        cases = [("digits 32x32x1", _config("digits", 32, 1, tmp)),
                 ("folder 64x64x4 (RGBA PNG)", folder)]
        rows = []
        for name, config in cases:
            pipe = pipeline_rate(config, args.iterations)
            rows.append((name, pipe, step_rate(config, args.steps)))
    load = os.getloadavg()[0]
    print(f"devices: {jax.device_count()} x {jax.devices()[0].platform}, cpu cores: "
          f"{os.cpu_count()}, load average (1 min): {load:.1f}; global batch 64, n_critic 5, "
          f"DCGAN width 64")
    print(f"folder conversion of {args.sprites} PNG sprites (once, cached): {convert:.1f} s\n")
    print("| dataset | pipeline images/s | train step images/s | pipeline / step |")
    print("|---|---:|---:|---:|")
    for name, pipe, step in rows:
        print(f"| {name} | {pipe:,.0f} | {step:,.0f} | {pipe / step:.1f}x |")


if __name__ == "__main__":
    main()
