"""DCGAN-style conv nets for square images of 16, 32 or 64 px and 1, 3 or 4 channels.

The layout is the WGAN-GP reference CIFAR DCGAN (`gan_cifar.py`), generalised in size:
G = Dense to 4x4x(DIM*2^(n-1)) + BN + ReLU, then 4x4 stride-2 transposed convs halving the
width down to DIM (BN + ReLU), then one more to the image's channels with tanh. D = 4x4
stride-2 convs from the image to DIM, 2*DIM, ... with LeakyReLU(0.2), then Dense to 1.
The critic has no BatchNorm unless asked for (only the classic logistic-loss baseline may).
With `num_classes > 0` both take `(inputs, labels)`: the generator gets a label embedding
concatenated to z and its BatchNorms become conditional (a gain and bias per class), and the
critic is a projection critic
(`wgan_jax.models.conditional`).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from wgan_jax.models.conditional import (
    generator_batch_norm,
    latent_with_label,
    projection_score,
    split_inputs,
)
from wgan_jax.models.layers import DownConv, UpConv
from wgan_jax.models.spectral import critic_layer

__all__ = ["DCGANGenerator", "DCGANCritic"]

_PROB_EPS = 1e-7  # a sigmoid output saturates like PyTorch's Sigmoid + BCELoss would


def _num_resamplings(image_size: int) -> int:
    n = int(math.log2(image_size)) - 2
    if image_size != 4 * 2**n or n < 1:
        raise ValueError(f"image_size must be 4 * 2^n with n >= 1, got {image_size}")
    return n


class DCGANGenerator(nn.Module):
    """z [B, Z] (or `(z, labels)` with `num_classes`) -> images [B, S, S, C] in [-1, 1]."""

    image_size: int = 32
    channels: int = 3
    width: int = 64  # DIM
    norm: str = "batch"  # "batch" (cross-replica over `axis_name`) or "none"
    axis_name: str | None = "data"
    conv_impl: str = "auto"
    dtype: DTypeLike = jnp.float32
    num_classes: int = 0  # > 0: conditional BatchNorm (needs norm="batch")

    def _norm(self, h: jax.Array, train: bool, labels: jax.Array | None) -> jax.Array:
        if self.norm != "batch":
            return h
        return generator_batch_norm(h, labels, train, self.num_classes, self.axis_name,
                                    self.dtype)

    @nn.compact
    def __call__(self, z: jax.Array, train: bool = True) -> jax.Array:
        z, labels = split_inputs(z, self.num_classes)
        n = _num_resamplings(self.image_size)
        bias = self.norm != "batch"  # a bias before BatchNorm cancels; its gradient is noise
        ch = self.width * 2 ** (n - 1)
        h = latent_with_label(z.astype(self.dtype), labels, self.num_classes)
        h = nn.Dense(4 * 4 * ch, use_bias=bias, dtype=self.dtype)(h)
        h = nn.relu(self._norm(h.reshape(z.shape[0], 4, 4, ch), train, labels))
        self.sow("intermediates", "relu_0", h)
        for i in range(n - 1):
            ch //= 2
            h = UpConv(ch, impl=self.conv_impl, use_bias=bias, dtype=self.dtype)(h)
            h = nn.relu(self._norm(h, train, labels))
            self.sow("intermediates", f"relu_{i + 1}", h)
        h = UpConv(self.channels, impl=self.conv_impl, dtype=self.dtype)(h)
        out = jnp.tanh(h.astype(jnp.float32))
        self.sow("intermediates", "tanh", out)
        return out


class DCGANCritic(nn.Module):
    """images [B, S, S, C] (or `(images, labels)` with `num_classes`: a projection critic)
    -> scores [B] (logits for the logistic loss)."""

    width: int = 64
    norm: str = "none"  # "none", "layer", "spectral", or "batch" (classic DCGAN baseline only)
    output: str = "linear"  # "sigmoid": saturating probability output, returned as a logit
    axis_name: str | None = "data"
    conv_impl: str = "auto"
    dtype: DTypeLike = jnp.float32
    num_classes: int = 0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        x, labels = split_inputs(x, self.num_classes)
        n = _num_resamplings(x.shape[1])
        h = x.astype(self.dtype)
        def layer(module: nn.Module, h: jax.Array) -> jax.Array:
            return critic_layer(module, h, norm=self.norm, train=train, axis_name=self.axis_name)

        for i in range(n):
            h = layer(DownConv(self.width * 2**i, impl=self.conv_impl, dtype=self.dtype), h)
            if self.norm == "layer":
                h = nn.LayerNorm(reduction_axes=(-3, -2, -1), dtype=self.dtype)(h)
            elif self.norm == "batch" and i > 0:
                h = nn.BatchNorm(
                    use_running_average=not train, axis_name=self.axis_name, dtype=self.dtype
                )(h)
            h = nn.leaky_relu(h, 0.2)
        features = h.reshape(h.shape[0], -1)
        out = layer(nn.Dense(1, dtype=self.dtype), features)[:, 0]
        if labels is not None:
            out = projection_score(self, features, out, labels, self.num_classes)
        out = out.astype(jnp.float32)
        if self.output == "sigmoid":
            p = jnp.clip(jax.nn.sigmoid(out), _PROB_EPS, 1.0 - _PROB_EPS)
            out = jnp.log(p) - jnp.log1p(-p)
        return out
