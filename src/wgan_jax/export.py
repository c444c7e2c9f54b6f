"""`python -m wgan_jax.export --workdir DIR --out FILE [--checkpoint latest|best|STEP] [--ema]
[--platforms cpu,cuda,tpu] [--batch N]`: the run's trained generator as one portable file.

Writes FILE, a serialized `jax.export` program (StableHLO; the weights inside, BatchNorm in
inference mode, a symbolic batch dimension unless `--batch N` fixes one, lowered for every
platform of `--platforms`), and FILE.json beside it: the latent size, the output's shape and
range, the classes, the run's config digest and checkpoint, the platforms, the jax version
(`wgan_jax.portable`). `jax` alone loads and calls it:
`jax.export.deserialize(bytearray(open(FILE, "rb").read())).call(z)` (and `labels` for a
class-conditional run) gives what `sample` gives for the latents `z` (docs/export.md).

A workdir without checkpoints, an unknown platform, a FILE that cannot be written, or a run
trained with its networks passed as objects (export it from Python then) is one `error:` line,
exit status 2, and nothing is written.
"""

from __future__ import annotations

from absl import app, flags

from wgan_jax import cli, fs, portable, runs
from wgan_jax.errors import UserError

RUN = cli.define_run_flags()
_OUT = flags.DEFINE_string("out", None, "The program's file; its metadata goes to FILE.json.")
_PLATFORMS = flags.DEFINE_string(
    "platforms", ",".join(portable.DEFAULT_PLATFORMS),
    f"Comma-separated platforms to lower for, of {', '.join(portable.PLATFORMS)}.")
_BATCH = flags.DEFINE_integer("batch", None, "A fixed batch size (default: symbolic, any size).")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not RUN.workdir.value or not _OUT.value:
        cli.fail("--workdir and --out are required")
    workdir, out = str(RUN.workdir.value), str(_OUT.value)
    cli.check_flag("checkpoint", RUN.checkpoint.value, runs.parse_checkpoint)
    platforms = cli.check_flag("platforms", _PLATFORMS.value, portable.parse_platforms)
    if _BATCH.value is not None and _BATCH.value < 1:
        cli.fail(f"--batch must be >= 1, got {_BATCH.value}")
    cli.setup_logging(True)

    def body() -> int:
        # Before the run is loaded: a path that cannot be written is one line at once.
        fs.check_writable_file(out, "--out")
        fs.check_writable_file(portable.metadata_path(out), "--out")
        objects = runs.networks_passed_as_objects(workdir)
        if objects:
            keywords = ", ".join(f"{w}=..." for w in objects)
            raise UserError(
                f"{workdir} was trained with its {' and '.join(objects)} passed as an object, "
                "which its config.json cannot rebuild: export it in Python with the same "
                f"networks, portable.export_generator(runs.load_run({workdir!r}, {keywords}))"
                f".write({out!r})")
        run = runs.load_run(workdir, RUN.checkpoint.value)
        exported = portable.export_generator(run, use_ema=RUN.ema.value, platforms=platforms,
                                             batch=_BATCH.value)
        exported.write(out)
        meta = exported.metadata
        weights = "EMA weights" if RUN.ema.value else "weights"
        batch = "any batch size" if _BATCH.value is None else f"batch size {_BATCH.value}"
        print(f"wrote the generator of checkpoint {run.step} ({weights}) for "
              f"{', '.join(platforms)}, {batch}, to {out} ({len(exported.program) / 1e3:.0f} "
              f"kB; how to call it: {portable.metadata_path(out)})")
        jacobian = meta["jacobian_truncation"]["run"]
        if jacobian:
            print(f"note: the run samples with Jacobian truncation ({jacobian:.1%} of latents "
                  "dropped, config.sampling.jacobian_truncation); the exported program is the "
                  "plain generator and does not drop any (docs/export.md)")
        return 0

    return cli.run_guarded(body)


def run() -> None:
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
