"""`python -m wgan_jax.sample --workdir DIR --num N --out FILE.npy [--seed S] [--checkpoint
latest|best|STEP] [--ema]`: N generated samples in data space, deterministic for a seed.

Toy runs give float32 [N, 2]; image runs float32 [N, H, W, C] in [-1, 1].
"""

from __future__ import annotations

import io
import sys

import numpy as np
from absl import app, flags

from wgan_jax import cli, fs

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's workdir.")
_NUM = flags.DEFINE_integer("num", 1000, "How many samples.")
_OUT = flags.DEFINE_string("out", None, "Output .npy file.")
_SEED = flags.DEFINE_integer("seed", 0, "Latent seed: the same seed gives the same samples.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", "latest, best, or a step number.")
_EMA = flags.DEFINE_boolean("ema", False, "Use the EMA generator weights (if the run kept them).")


def load_generator_state(workdir: str, which: str = "latest"):
    """(config, gan, state, step) restored from `workdir`'s checkpoints on the local devices."""
    from wgan_jax import checkpoint as ckpt
    from wgan_jax.errors import UserError
    from wgan_jax.step import make_mesh
    from wgan_jax.train import abstract_train_state, build_gan, load_config_json

    if not fs.isdir(workdir):
        raise UserError(f"workdir {workdir!r} does not exist")
    config = load_config_json(workdir)
    gan = build_gan(config)
    mesh = make_mesh()
    # Read-only: a trainer may be writing this workdir right now.
    checkpointer = ckpt.Checkpointer(workdir, best_metric=config.eval.metric, read_only=True)
    try:
        if which == "latest":
            step = None
        elif which == "best":
            best = checkpointer.best()
            if best is None:
                raise UserError(f"{workdir} has no best checkpoint (evaluation was off)")
            step = int(best["step"])
        elif which.isdigit():
            step = int(which)
            if step not in checkpointer.all_steps():
                raise UserError(f"no checkpoint {step} in {checkpointer.directory}; "
                                f"have {checkpointer.all_steps()}")
        else:
            raise UserError(f"--checkpoint must be latest, best or a step, got {which!r}")
        restored = checkpointer.restore(abstract_train_state(gan, config, mesh), step)
    finally:
        checkpointer.close()
    if restored is None:
        raise UserError(f"no checkpoint in {checkpointer.directory}")
    state, _, step = restored
    return config, gan, state, step


def generate_samples(gan, state, num: int, seed: int, use_ema: bool = False) -> np.ndarray:
    """`num` samples as float32 numpy, from latents drawn with `seed` (batching-independent)."""
    from wgan_jax.evaluation import draw_samples

    return draw_samples(gan, state, num, seed=seed, use_ema=use_ema)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value or not _OUT.value:
        cli.fail("--workdir and --out are required")
    if _NUM.value < 1:
        cli.fail(f"--num must be >= 1, got {_NUM.value}")
    cli.setup_logging(True)

    def body() -> int:
        config, gan, state, step = load_generator_state(_WORKDIR.value, _CHECKPOINT.value)
        use_ema = _EMA.value
        if use_ema and state.ema_params is None:
            from wgan_jax.errors import UserError

            raise UserError("--ema: this run kept no EMA weights (config.ema_decay was 0)")
        samples = generate_samples(gan, state, _NUM.value, _SEED.value, use_ema)
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
