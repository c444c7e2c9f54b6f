"""Label accuracy against iterations for candidate changes to a conditional conv GAN.

    python benchmarks/conditional_study.py --variants fixed,cbn_only+lr1e-3 [--config default]
        [--num_iterations 600] [--eval_every 200] [--num_samples 1000] [--seed 0]
        [--root /tmp/wgan_cond_study] [--out benchmarks/results/conditional_study.jsonl]

Each variant trains the config (default: the embedded default, `model.conditional=projection`)
from scratch in this process and evaluates every `eval_every` iterations; the row it appends
holds `eval/label_accuracy` (the share of generated digits the digit classifier assigns to
their label; chance 10%) at each evaluation. A variant is "fixed" (the shipped networks) or
changes joined by "+" (`parse_variant`): config overrides (`OVERRIDES`: "lr1e-3", "ncritic2",
"resnet") and swaps of one piece of the conditional networks in this process (`PATCHES`; the
pieces before the fix, "cbn_only" and "embed_normal002", are kept so that the measurement can
be repeated). Iterations, not wall time, are the axis: the machine these numbers were measured
on was shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import REPO, apply_overrides, load_config, train_timed

# A variant is "fixed" (the shipped networks and the default config) or changes joined by "+",
# e.g. "cbn_only+lr1e-3": config overrides (`OVERRIDES`) and piece swaps (`_patch`).
OVERRIDES: dict[str, dict] = {
    "lr1e-3": {"generator_lr": 1e-3, "critic_lr": 1e-3},
    "ncritic2": {"n_critic": 2},
    "resnet": {"model.kind": "resnet", "model.width": 32},
}
PATCHES = (
    "cbn_only",  # the generator before the fix: labels only through conditional BatchNorm
    "plain_bn",  # the generator's BatchNorms unconditional (labels only through z)
    "gain0",  # conditional BatchNorm's gain stored 0-centred: 1 + g, g initialised to 0
    "z_onehot",  # a one-hot label on z instead of the learned embedding
    "embed_normal002",  # the projection embedding initialised N(0, 0.02) (before the fix)
    "embed_normal1",  # ... N(0, 1)
    "proj_pooled",  # the dcgan critic's projection on its 4x4 features averaged over positions
)


def parse_variant(name: str) -> tuple[dict, list[str]]:
    """(config overrides, piece swaps) of a variant name; `KeyError` for an unknown part."""
    overrides, patches = {}, []
    for part in ([] if name == "fixed" else name.split("+")):
        if part in OVERRIDES:
            overrides.update(OVERRIDES[part])
        elif part in PATCHES:
            patches.append(part)
        else:
            raise KeyError(f"unknown variant part {part!r} in {name!r}")
    return overrides, patches


def _patch(names: list[str]) -> None:
    """Swap pieces of the conditional networks for this process (one variant per process)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from wgan_jax.models import conditional, dcgan, resnet

    embed_init = nn.initializers.glorot_uniform()
    pooled = False
    for name in names:
        if name == "cbn_only":
            dcgan.latent_with_label = resnet.latent_with_label = lambda z, labels, n: z
        elif name == "embed_normal002":
            embed_init = nn.initializers.normal(0.02)
        elif name == "embed_normal1":
            embed_init = nn.initializers.normal(1.0)
        elif name == "proj_pooled":
            pooled = True
        elif name == "z_onehot":
            def onehot(z, labels, num_classes):
                return jnp.concatenate([z, jax.nn.one_hot(labels, num_classes, dtype=z.dtype)], -1)
            dcgan.latent_with_label = resnet.latent_with_label = onehot
        elif name == "gain0":
            conditional.ConditionalBatchNorm = _gain_zero_centred_class()
        elif name == "plain_bn":
            plain = conditional.generator_batch_norm

            def generator_batch_norm(h, labels, *args, _plain=plain):
                return _plain(h, None, *args)
            dcgan.generator_batch_norm = resnet.generator_batch_norm = generator_batch_norm

    def projection_score(module, features, linear, labels, num_classes):
        if pooled:  # the DCGAN critic's 4x4 features, averaged over positions
            features = features.reshape(features.shape[0], 16, -1).mean(axis=1)
        embed = nn.Embed(num_classes, features.shape[-1], name="class_embed",
                         embedding_init=embed_init, parent=module)
        return linear + jnp.sum(embed(labels).astype(features.dtype) * features, axis=-1)

    if {"embed_normal002", "embed_normal1", "proj_pooled"} & set(names):
        dcgan.projection_score = resnet.projection_score = projection_score


def _gain_zero_centred_class():
    """`ConditionalBatchNorm` with its per-class gain stored as 1 + g, g initialised to 0."""
    import flax.linen as nn

    from wgan_jax.models.conditional import ConditionalBatchNorm

    class GainZeroCentred(ConditionalBatchNorm):
        @nn.compact
        def __call__(self, h, labels, train):
            h = nn.BatchNorm(use_running_average=not train, axis_name=self.axis_name,
                             use_scale=False, use_bias=False, use_fast_variance=False,
                             dtype=self.dtype)(h)
            features = h.shape[-1]
            gain = 1.0 + nn.Embed(self.num_classes, features,
                                  embedding_init=nn.initializers.zeros, name="gain")(labels)
            bias = nn.Embed(self.num_classes, features, embedding_init=nn.initializers.zeros,
                            name="bias")(labels)
            shape = (h.shape[0],) + (1,) * (h.ndim - 2) + (features,)
            return h * gain.reshape(shape).astype(h.dtype) + bias.reshape(shape).astype(h.dtype)

    return GainZeroCentred


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="fixed")
    parser.add_argument("--config", default="default")
    parser.add_argument("--num_iterations", type=int, default=600)
    parser.add_argument("--eval_every", type=int, default=200)
    parser.add_argument("--num_samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="/tmp/wgan_cond_study")
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                      "conditional_study.jsonl"))
    args = parser.parse_args()
    names = args.variants.split(",")
    if len(names) == 1:
        run_variant(names[0], args)
        return
    for name in names:  # one process per variant: the piece swaps are process-wide
        argv = [a for a in sys.argv[1:] if not a.startswith("--variants")]
        subprocess.run([sys.executable, __file__, f"--variants={name}", *argv], check=True)


def run_variant(name: str, args: argparse.Namespace) -> dict:
    spec, patches = parse_variant(name)
    _patch(patches)
    config = load_config(args.config)
    config.model.conditional = "projection"
    config.num_iterations = args.num_iterations
    config.eval_every = args.eval_every
    config.eval.num_samples = args.num_samples
    config.seed = args.seed
    config.sample_every = args.num_iterations
    config.plot_every = 0
    apply_overrides(config, spec)
    workdir = os.path.join(args.root, f"{name}_s{args.seed}")
    timing = train_timed(config, workdir)
    curve = {}
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "eval/label_accuracy" in row:
                curve[int(row["step"])] = row["eval/label_accuracy"]
    row = {"variant": name, "config": args.config, "seed": args.seed, "overrides": spec,
           "patch": patches, "label_accuracy": curve, **timing,
           "command": " ".join(sys.argv)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
