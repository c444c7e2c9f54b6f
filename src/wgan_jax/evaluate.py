"""`python -m wgan_jax.evaluate --workdir DIR [--checkpoint best|latest|STEP] [--num N]
[--seed S] [--json]`: the sample-quality metrics of one checkpoint.

Prints a table (metric, value, and which direction is better), or with `--json` one JSON object
`{"workdir", "step", "num_samples", "ema", "dataset", "metrics": {"eval/...": value}}` on stdout.
The metrics are those `wgan_jax.evaluators.make_evaluator` picks for the run's dataset; the EMA
generator is used when the run kept one. Bad input exits with status 2 and one `error:` line.
"""

from __future__ import annotations

import json
from typing import cast

from absl import app, flags

from wgan_jax import cli, fs, runs
from wgan_jax.config import MIN_EVAL_SAMPLES
from wgan_jax.metrics.ranking import lower_is_better

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's workdir.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", "latest, best, or a step number.")
_NUM = flags.DEFINE_integer("num", None, "Samples to evaluate (default: config.eval.num_samples).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the latents and the real reference samples.")
_JSON = flags.DEFINE_boolean("json", False, "Print one JSON object instead of a table.")


def format_table(metrics: dict[str, float]) -> str:
    """Aligned `metric  value  (better)` lines."""
    width = max(len(k) for k in metrics)
    lines = []
    for key, value in metrics.items():
        direction = ("a class" if key.endswith("_label") else
                     "lower is better" if lower_is_better(key) else "higher is better")
        shown = f"{int(value)}" if key.endswith(("/modes", "_label")) else f"{value:.6g}"
        lines.append(f"{key:<{width}}  {shown:>12}  ({direction})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _WORKDIR.value:
        cli.fail("--workdir is required")
    if not fs.isdir(_WORKDIR.value):
        cli.fail(f"workdir {_WORKDIR.value!r} does not exist")
    if _NUM.value is not None and _NUM.value < MIN_EVAL_SAMPLES:
        cli.fail(f"--num must be >= {MIN_EVAL_SAMPLES} (as config.eval.num_samples), "
                 f"got {_NUM.value}")
    which = _CHECKPOINT.value
    cli.check_flag("checkpoint", which, runs.parse_checkpoint)
    cli.setup_logging(True)

    def body() -> int:
        report = runs.evaluate_run(cast(str, _WORKDIR.value), which, _NUM.value, _SEED.value)
        if _JSON.value:
            print(json.dumps(report, sort_keys=True))
        else:
            print(f"{report['workdir']}: checkpoint {report['step']}, {report['dataset']}, "
                  f"{report['num_samples']} samples"
                  + (", EMA generator" if report["ema"] else ""))
            print(format_table({k: float(v) for k, v in report["metrics"].items()}))
        return 0

    return cli.run_guarded(body)


def run() -> None:
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
