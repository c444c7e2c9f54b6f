"""`python -m wgan_jax.sample --workdir DIR --num N --out FILE.npy [--seed S] [--checkpoint
latest|best|STEP] [--ema] [--truncation PSI]`: N generated samples in data space, deterministic
for a seed. Toy runs give float32 [N, 2]; image runs float32 [N, H, W, C] in [-1, 1].

`--interpolate STEPS --out FILE.png|FILE.gif [--rows R]` (image runs): R spherical
interpolations between seeded latents, as a grid PNG (a row each) or an animated GIF of STEPS
frames. `--truncation PSI` redraws latent coordinates beyond +-PSI, in both modes.
"""

from __future__ import annotations

import io
import math
import sys

import numpy as np
from absl import app, flags

from wgan_jax import cli, fs, runs

FLAGS = flags.FLAGS

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's workdir.")
_NUM = flags.DEFINE_integer("num", 1000, "How many samples.")
_OUT = flags.DEFINE_string("out", None, "Output .npy file.")
_SEED = flags.DEFINE_integer("seed", 0, "Latent seed: the same seed gives the same samples.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", "latest, best, or a step number.")
_EMA = flags.DEFINE_boolean("ema", False, "Use the EMA generator weights (if the run kept them).")
_TRUNCATION = flags.DEFINE_float(
    "truncation", None, "Truncation psi > 0: latent coordinates beyond +-psi are redrawn.")
_INTERPOLATE = flags.DEFINE_integer(
    "interpolate", None, "Write STEPS-step latent interpolations to --out (.png or .gif).")
_ROWS = flags.DEFINE_integer("rows", 4, "How many interpolations (with --interpolate).")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value or not _OUT.value:
        cli.fail("--workdir and --out are required")
    if _NUM.value < 1:
        cli.fail(f"--num must be >= 1, got {_NUM.value}")
    psi = _TRUNCATION.value
    if psi is not None and not (math.isfinite(psi) and psi > 0):
        cli.fail(f"--truncation must be a number > 0, got {psi}")
    steps = _INTERPOLATE.value
    if steps is not None:
        if steps < 2:
            cli.fail(f"--interpolate must be >= 2 steps, got {steps}")
        if _ROWS.value < 1:
            cli.fail(f"--rows must be >= 1, got {_ROWS.value}")
        if FLAGS["num"].present:
            cli.fail("--num does not apply to --interpolate (use --rows)")
        if not _OUT.value.lower().endswith(runs.INTERPOLATION_FORMATS):
            cli.fail(f"--out must end in .png or .gif with --interpolate, got {_OUT.value!r}")
    elif FLAGS["rows"].present:
        cli.fail("--rows applies to --interpolate only")

    try:
        runs.parse_checkpoint(_CHECKPOINT.value)
    except ValueError as error:
        cli.fail(f"--checkpoint {error}")
    cli.setup_logging(True)

    def body() -> int:
        run = runs.load_run(_WORKDIR.value, _CHECKPOINT.value)
        if steps is not None:
            shape = runs.write_interpolation(run, _OUT.value, steps, _SEED.value,
                                             rows=_ROWS.value, truncation=psi,
                                             use_ema=_EMA.value)
            print(f"wrote {shape[0]} interpolations of {shape[1]} steps from checkpoint "
                  f"{run.step} to {_OUT.value}")
            return 0
        samples = runs.generate_samples(run.gan, run.state, _NUM.value, _SEED.value, _EMA.value,
                                        truncation=psi)
        out = _OUT.value
        buffer = io.BytesIO()
        np.save(buffer, samples)
        fs.write_atomic(out, buffer.getvalue())
        print(f"wrote {samples.shape} samples from checkpoint {run.step} to {out}")
        return 0

    return cli.run_guarded(body)


def run() -> None:
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    sys.exit(run())
