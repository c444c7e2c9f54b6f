"""`python -m wgan_jax.sample --workdir DIR --num N --out FILE.npy [--seed S] [--checkpoint
latest|best|STEP] [--ema] [--truncation PSI] [--label K | --labels K1,K2,...]`: N generated
samples in data space, deterministic for a seed. Toy runs give float32 [N, 2]; image runs
float32 [N, H, W, C] in [-1, 1]. A `.npy` file is streamed to disk in blocks of
`runs.SAMPLE_BLOCK` (memory bounded for any N, a progress line every 5 s, the file replaced
only once complete); `--out FILE.png` writes a picture instead: an image grid, or a scatter
plot of a toy run's 2-D samples. Another suffix, a directory or a place that cannot be
written is one `error:` line before anything is loaded.

`--interpolate STEPS --out FILE.png|FILE.gif [--rows R]` (image runs): R spherical
interpolations between seeded latents, as a grid PNG (a row each) or an animated GIF of STEPS
frames. `--truncation PSI` redraws latent coordinates beyond +-PSI, in both modes.
`--jacobian_truncation Q` (default: the run's `config.sampling.jacobian_truncation`) drops the
share Q of latents where the generator is steepest (`wgan_jax.jacobian_truncation`); the
closing line says when it did.
A class-conditional run with `--labels` gives N samples of each class, class after class;
`--out FILE.png` then writes a grid with one class per row.
"""

from __future__ import annotations

import math
import sys
import time

from absl import app, flags

from wgan_jax import cli, fs, jacobian_truncation, runs
from wgan_jax.errors import UserError

FLAGS = flags.FLAGS

RUN = cli.define_run_flags()
_NUM = flags.DEFINE_integer("num", 1000, "How many samples.")
_OUT = flags.DEFINE_string(
    "out", None, "Output file: .npy (the samples, streamed to disk) or .png (a picture).")
_SEED = flags.DEFINE_integer("seed", 0, "Latent seed: the same seed gives the same samples.")
_TRUNCATION = flags.DEFINE_float(
    "truncation", None, "Truncation psi > 0: latent coordinates beyond +-psi are redrawn.")
_JACOBIAN = flags.DEFINE_float(
    "jacobian_truncation", None, "Share in [0, 1) of latents dropped where the generator is "
    "steepest; default: the run's config.sampling.jacobian_truncation.")
_INTERPOLATE = flags.DEFINE_integer(
    "interpolate", None, "Write STEPS-step latent interpolations to --out (.png or .gif).")
_ROWS = flags.DEFINE_integer("rows", 4, "How many interpolations (with --interpolate).")
_LABEL = flags.DEFINE_integer("label", None, "Class-conditional runs: samples of class K.")
_LABELS = flags.DEFINE_string("labels", None, "Class-conditional runs: K1,K2,...: --num samples "
                              "of each class (a .png --out: one class per row).")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not RUN.workdir.value or not _OUT.value:
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

    jacobian = _JACOBIAN.value
    if jacobian is not None:
        cli.check_flag("jacobian_truncation", jacobian, jacobian_truncation.check_fraction)
    labels = _parse_labels()
    if labels is not None and (steps is not None or psi is not None):
        cli.fail("--label/--labels cannot be combined with --interpolate or --truncation yet")
    if jacobian and (labels is not None or steps is not None):
        cli.fail("--jacobian_truncation applies to unconditional samples, not to --label/"
                 "--labels or --interpolate")
    cli.check_flag("checkpoint", RUN.checkpoint.value, runs.parse_checkpoint)
    cli.setup_logging(True)

    try:  # before the run is loaded: a path that cannot be written is one line at once
        if steps is None:
            runs.check_sample_out(_OUT.value, _NUM.value)
        else:
            fs.check_writable_file(_OUT.value, "--out")
    except UserError as error:
        cli.fail(cli.first_line(error))

    workdir, out = RUN.workdir.value, _OUT.value

    def body() -> int:
        run = runs.load_run(workdir, RUN.checkpoint.value)
        if steps is not None:
            shape = runs.write_interpolation(run, out, steps, _SEED.value,
                                             rows=_ROWS.value, truncation=psi,
                                             use_ema=RUN.ema.value)
            print(f"wrote {shape[0]} interpolations of {shape[1]} steps from checkpoint "
                  f"{run.step} to {_OUT.value}")
            return 0
        if labels is not None:
            flag = "--label" if _LABEL.value is not None else "--labels"
            try:
                runs.check_labels(run.gan, labels)
            except UserError as error:
                cli.fail(f"{flag}: {error}")
        dropped = (float(run.config.sampling.jacobian_truncation) if jacobian is None
                   else jacobian)  # a conditional run's config holds 0 (validate_config)
        shape = runs.write_samples(run, out, _NUM.value, _SEED.value, RUN.ema.value,
                                   truncation=psi, labels=labels, progress=_Progress(),
                                   jacobian_truncation=dropped)
        what = (f"a grid of classes {labels} (one per row)" if labels is not None
                and out.lower().endswith(".png") else f"{shape} samples")
        how = f" (Jacobian truncation: {dropped:.1%} of latents dropped)" if dropped else ""
        print(f"wrote {what} from checkpoint {run.step} to {out}{how}")
        return 0

    return cli.run_guarded(body)


class _Progress:
    """`sample: N of M samples written (P%)` on stderr, at most every 5 seconds (large --num)."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every and done < total:
            self.last = now
            sys.stderr.write(f"sample: {done} of {total} samples written "
                             f"({100 * done / total:.0f}%)\n")
            sys.stderr.flush()


def _parse_labels() -> list[int] | None:
    """The classes `--label` / `--labels` ask for, or None."""
    if _LABEL.value is not None and _LABELS.value is not None:
        cli.fail("give --label or --labels, not both")
    if _LABEL.value is not None:
        return [_LABEL.value]
    if _LABELS.value is None:
        return None
    try:
        labels = [int(k) for k in _LABELS.value.split(",")]
    except ValueError:
        cli.fail(f"--labels must be comma-separated class numbers, got {_LABELS.value!r}")
    return labels


def run() -> None:
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
