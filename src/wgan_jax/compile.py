"""`python -m wgan_jax.compile --config CFG --topology v5e:16x16 [--config.key=value ...]
[--json] [--nogenerators]`: a run compiled for a TPU slice before it is booked.

Builds the programs the trainer runs on every chip of the slice (the train step, all chips
on the data axis and the config's global batch split over them, platform choices resolved
for a TPU; the generator's passes at the evaluation's and the pictures' batch), compiles them
with XLA's TPU compiler on this machine, without a TPU (libtpu: `pip install
'wgan-jax[tpu]'`), and prints one table: HBM per chip against the chip's, FLOPs, all-reduces
against the minimum, a lower bound on the iteration's time (`wgan_jax.compile_check`). The
config flags are `main`'s.

An unknown topology, a global batch that does not split over the chips, a config that does
not fit a chip (by how much, and the largest per-chip batch that does), or libtpu missing is
one `error:` line, exit status 2. Nothing is written.
"""

from __future__ import annotations

import json
import os
import sys

# This command never computes: JAX stays on the CPU, libtpu is its compiler only.
os.environ["JAX_PLATFORMS"] = "cpu"

from absl import app, flags  # noqa: E402

from wgan_jax import cli, targets  # noqa: E402
from wgan_jax.errors import UserError  # noqa: E402

_CONFIG = cli.define_config_flag()
_TOPOLOGY = flags.DEFINE_string("topology", None, f"The TPU slice: {targets.ACCEPTED_FORMS}.")
_JSON = flags.DEFINE_boolean("json", False, "Print the report as one JSON line, not a table.")
_GENERATORS = flags.DEFINE_boolean(
    "generators", True, "Also compile the generator's evaluation and picture passes.")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _TOPOLOGY.value:
        cli.fail("--topology is required (e.g. v5e:4x4 or v5litepod-16)")
    config = cli.load_config(_CONFIG)
    try:
        target = targets.target(_TOPOLOGY.value)
    except UserError as error:
        cli.fail(cli.first_line(error))
    cli.setup_logging(True)

    def report() -> int:
        from wgan_jax import compile_check

        result = compile_check.check(config, target, generators=_GENERATORS.value)
        if _JSON.value:
            print(json.dumps(result.as_dict()))
        else:
            print(compile_check.format_report(result))
        return 0

    def body() -> int:
        targets.require_libtpu()
        targets.per_chip_batch(int(config.global_batch_size), target)
        if sys.stderr.isatty():  # minutes for a large model; a refusal stays one line
            sys.stderr.write(f"compiling for {target.topology} ({target.chips} chips, "
                             f"{target.chip.device_kind}) with the TPU compiler ...\n")
        # In a child: a crash of the compiler itself becomes one line here.
        return targets.isolated(lambda: cli.run_guarded(report), target)

    return cli.run_guarded(body)


def run() -> None:
    app.run(main, flags_parser=cli.parse_config_flags)


if __name__ == "__main__":
    run()
