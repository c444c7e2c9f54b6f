"""`python -m wgan_jax.sample --workdir DIR --num N --out FILE.npy [--seed S] [--checkpoint
latest|best|STEP] [--ema]`: N generated samples in data space, deterministic for a seed.

Toy runs give float32 [N, 2]; image runs float32 [N, H, W, C] in [-1, 1].
"""

from __future__ import annotations

import io
import sys

import numpy as np
from absl import app, flags

from wgan_jax import cli, fs, runs

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's workdir.")
_NUM = flags.DEFINE_integer("num", 1000, "How many samples.")
_OUT = flags.DEFINE_string("out", None, "Output .npy file.")
_SEED = flags.DEFINE_integer("seed", 0, "Latent seed: the same seed gives the same samples.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", "latest, best, or a step number.")
_EMA = flags.DEFINE_boolean("ema", False, "Use the EMA generator weights (if the run kept them).")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value or not _OUT.value:
        cli.fail("--workdir and --out are required")
    if _NUM.value < 1:
        cli.fail(f"--num must be >= 1, got {_NUM.value}")

    try:
        runs.parse_checkpoint(_CHECKPOINT.value)
    except ValueError as error:
        cli.fail(f"--checkpoint {error}")
    cli.setup_logging(True)

    def body() -> int:
        _, gan, state, step = runs.load_run(_WORKDIR.value, _CHECKPOINT.value)
        samples = runs.generate_samples(gan, state, _NUM.value, _SEED.value, _EMA.value)
        out = _OUT.value
        buffer = io.BytesIO()
        np.save(buffer, samples)
        fs.write_atomic(out, buffer.getvalue())
        print(f"wrote {samples.shape} samples from checkpoint {step} to {out}")
        return 0

    return cli.run_guarded(body)


def run() -> None:
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    sys.exit(run())
