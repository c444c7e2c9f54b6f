"""The class-conditional parts of the built-in networks (`model.conditional = "projection"`).

Conditional networks take `x = (inputs, labels)`, labels int `[B]` in `[0, num_classes)`:

* `ConditionalBatchNorm`: cross-replica BatchNorm without its own affine part, followed by a
  gain and a bias per class (de Vries et al. 2017; Miyato & Koyama 2018's generator);
  `generator_batch_norm` picks it or a plain BatchNorm (dcgan and resnet generators);
* `latent_with_label`: the generator's latent with a learned label embedding concatenated
  (every conditional generator; with conditional BatchNorm alone a conv generator ignores its
  labels for most of a short run: see README's "Class-conditional GANs");
* `projection_score`: the projection critic's output (Miyato & Koyama 2018),
  `psi(phi(x)) + <embed(y), phi(x)>` for the critic's last features `phi(x)`.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

__all__ = ["ConditionalBatchNorm", "generator_batch_norm", "latent_with_label", "projection_score",
           "split_inputs"]


def split_inputs(x: Any, num_classes: int) -> tuple[jax.Array, jax.Array | None]:
    """`(inputs, labels)` of a conditional network's input, `(x, None)` of an unconditional's."""
    if not num_classes:
        return x, None
    inputs, labels = x
    return inputs, labels


def latent_with_label(z: jax.Array, labels: jax.Array | None, num_classes: int) -> jax.Array:
    """`z` `[B, Z]` with a learned embedding of `labels` (`[B, Z]`, Flax's default N(0, 1)-scale
    init, so the label is as loud as the latent from the first step) concatenated: `[B, 2Z]`;
    `z` unchanged without labels. Call inside the generator's `nn.compact` method (the
    parameter is the generator's `class_embed`)."""
    if labels is None:
        return z
    embedding = nn.Embed(num_classes, z.shape[-1], name="class_embed")(labels)
    return jnp.concatenate([z, embedding.astype(z.dtype)], axis=-1)


class ConditionalBatchNorm(nn.Module):
    """BatchNorm (statistics over `axis_name`) with a per-class gain (init 1) and bias (init 0)."""

    num_classes: int
    axis_name: str | None = "data"
    dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, h: jax.Array, labels: jax.Array, train: bool) -> jax.Array:
        h = nn.BatchNorm(
            use_running_average=not train, axis_name=self.axis_name, use_scale=False,
            use_bias=False, use_fast_variance=False, dtype=self.dtype,
        )(h)
        features = h.shape[-1]
        gain = nn.Embed(self.num_classes, features, embedding_init=nn.initializers.ones,
                        name="gain")(labels)
        bias = nn.Embed(self.num_classes, features, embedding_init=nn.initializers.zeros,
                        name="bias")(labels)
        shape = (h.shape[0],) + (1,) * (h.ndim - 2) + (features,)
        return h * gain.reshape(shape).astype(h.dtype) + bias.reshape(shape).astype(h.dtype)


def generator_batch_norm(
    h: jax.Array, labels: jax.Array | None, train: bool, num_classes: int,
    axis_name: str | None, dtype: DTypeLike,
) -> jax.Array:
    """A generator's cross-replica BatchNorm of `h`: conditional on `labels` when given, else
    plain (learned scale and bias). Call inside the calling module's `nn.compact` method."""
    if labels is not None:
        return ConditionalBatchNorm(num_classes, axis_name, dtype)(h, labels, train)
    return nn.BatchNorm(
        use_running_average=not train, axis_name=axis_name, use_fast_variance=False, dtype=dtype,
    )(h)


def projection_score(
    module: nn.Module, features: jax.Array, linear: jax.Array, labels: jax.Array,
    num_classes: int,
) -> jax.Array:
    """`linear` (psi(phi), `[B]`) plus `<embed(labels), features>`; call in `nn.compact`.

    The embedding is initialised Glorot-uniform, as in Miyato & Koyama's code: with N(0, 0.02)
    the resnet critic (32 pooled features) followed its labels 23% of the time after 600
    iterations instead of 66% (`benchmarks/conditional_study.py`)."""
    embed = nn.Embed(num_classes, features.shape[-1], name="class_embed",
                     embedding_init=nn.initializers.glorot_uniform(), parent=module)
    return linear + jnp.sum(embed(labels).astype(features.dtype) * features, axis=-1)
