"""The WGAN-GP paper's CIFAR-10 ResNet (Gulrajani et al. 2017, Appendix F), for 16-64 px.

Pre-activation residual blocks with 3x3 convolutions. Generator: Dense to 4x4xW, then one
"up" block per doubling (BN, ReLU, nearest 2x upsampling, conv, BN, ReLU, conv; shortcut =
upsampled 1x1 conv), then BN, ReLU, 3x3 conv to the image channels and tanh. BatchNorm is
cross-replica (`axis_name="data"`, exact two-pass variance), and no layer feeding a BatchNorm has
a bias (it would cancel; its gradient is float noise). Critic, no BatchNorm: an "optimized"
first block (conv, ReLU, conv, 2x2 mean pool; shortcut = mean pool then 1x1 conv), "down" blocks
to 8x8, two blocks at 8x8, ReLU, global mean pool, Dense to 1. With 32 px and W = 128 this is the
paper's model (3 up blocks in G; 1 + 1 down and 2 plain blocks in D).
With `num_classes > 0` both take `(inputs, labels)` (Miyato & Koyama 2018's ResNets): the
generator gets a label embedding concatenated to z and its blocks' BatchNorms become
conditional (a gain and bias per class; the last BatchNorm stays plain), and the critic is a
projection critic on its pooled features (`wgan_jax.models.conditional`).
Every convolution is a `layers.SameConv` with the model's `conv_impl` (on CPU by default its
derivatives avoid XLA:CPU's slow weight-gradient convolutions), named as Flax names
``nn.Conv`` layers (``Conv_0``, ``Conv_1``, ... per module), so the parameter tree is the one
``nn.Conv`` builds.
"""

from __future__ import annotations

import itertools
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
from wgan_jax.models.layers import SameConv
from wgan_jax.models.spectral import CRITIC_NORMS, critic_layer

__all__ = ["ResNetGenerator", "ResNetCritic"]


def _doublings(size_from: int, size_to: int) -> int:
    n = int(round(math.log2(size_to / size_from)))
    if size_from * 2**n != size_to or n < 1:
        raise ValueError(f"image_size must be {size_from} * 2^n with n >= 1, got {size_to}")
    return n


def upsample(x: jax.Array) -> jax.Array:
    """Nearest-neighbour 2x upsampling of NHWC."""
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


def mean_pool(x: jax.Array) -> jax.Array:
    """2x2 average pooling of NHWC (stride 2)."""
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def _conv_factory(features: int, impl: str, use_bias: bool, dtype: DTypeLike):
    """`k -> SameConv` named Conv_0, Conv_1, ... in call order, as Flax names ``nn.Conv``."""
    count = itertools.count()
    return lambda k: SameConv(features, impl=impl, use_bias=use_bias, dtype=dtype,
                              kernel_size=k, name=f"Conv_{next(count)}")


class _GenBlock(nn.Module):
    features: int
    norm: str
    axis_name: str | None
    dtype: DTypeLike
    num_classes: int = 0
    conv_impl: str = "auto"

    def _norm(self, h: jax.Array, train: bool, labels: jax.Array | None) -> jax.Array:
        if self.norm != "batch":
            return h
        return generator_batch_norm(h, labels, train, self.num_classes, self.axis_name,
                                    self.dtype)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool, labels: jax.Array | None = None) -> jax.Array:
        conv = _conv_factory(self.features, self.conv_impl, self.norm != "batch", self.dtype)
        shortcut = upsample(conv(1)(x))  # a 1x1 conv commutes with nearest upsampling
        h = upsample(nn.relu(self._norm(x, train, labels)))
        h = conv(3)(h)
        h = conv(3)(nn.relu(self._norm(h, train, labels)))
        return h + shortcut


class ResNetGenerator(nn.Module):
    """z [B, Z] (or `(z, labels)` with `num_classes`) -> images [B, S, S, C] in [-1, 1]."""

    image_size: int = 32
    channels: int = 3
    width: int = 128
    norm: str = "batch"  # "batch" (cross-replica over `axis_name`) or "none"
    axis_name: str | None = "data"
    dtype: DTypeLike = jnp.float32
    num_classes: int = 0  # > 0: conditional BatchNorm in the blocks (needs norm="batch")
    conv_impl: str = "auto"  # `layers.SameConv`'s impl

    @nn.compact
    def __call__(self, z: jax.Array, train: bool = True) -> jax.Array:
        z, labels = split_inputs(z, self.num_classes)
        n = _doublings(4, self.image_size)
        bias = self.norm != "batch"
        h = latent_with_label(z.astype(self.dtype), labels, self.num_classes)
        h = nn.Dense(4 * 4 * self.width, use_bias=bias, dtype=self.dtype)(h)
        h = h.reshape(z.shape[0], 4, 4, self.width)
        for i in range(n):
            h = _GenBlock(self.width, self.norm, self.axis_name, self.dtype, self.num_classes,
                          self.conv_impl, name=f"block_{i}")(h, train, labels)
            self.sow("intermediates", f"block_{i}", h)
        if self.norm == "batch":
            h = nn.BatchNorm(
                use_running_average=not train, axis_name=self.axis_name,
                use_fast_variance=False, dtype=self.dtype,
            )(h)
        h = nn.relu(h)
        self.sow("intermediates", "relu_out", h)
        h = SameConv(self.channels, impl=self.conv_impl, dtype=self.dtype, name="Conv_0")(h)
        out = jnp.tanh(h.astype(jnp.float32))
        self.sow("intermediates", "tanh", out)
        return out


class _CriticBlock(nn.Module):
    features: int
    resample: str  # "first", "down" or "none"
    norm: str
    dtype: DTypeLike
    axis_name: str | None
    conv_impl: str = "auto"

    def _act(self, h: jax.Array) -> jax.Array:
        if self.norm == "layer":
            h = nn.LayerNorm(reduction_axes=(-3, -2, -1), dtype=self.dtype)(h)
        return nn.relu(h)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        make = _conv_factory(self.features, self.conv_impl, True, self.dtype)

        def conv(k: int):
            layer = make(k)
            return lambda h: critic_layer(
                layer, h, norm=self.norm, train=train, axis_name=self.axis_name
            )

        if self.resample == "first":
            h = conv(3)(x)
            h = mean_pool(conv(3)(self._act(h)))
            return h + conv(1)(mean_pool(x))
        h = conv(3)(self._act(x))
        h = conv(3)(self._act(h))
        if self.resample == "down":
            return mean_pool(h) + conv(1)(mean_pool(x))
        shortcut = x if x.shape[-1] == self.features else conv(1)(x)
        return h + shortcut


class ResNetCritic(nn.Module):
    """images [B, S, S, C] (or `(images, labels)` with `num_classes`: a projection critic)
    -> scores [B]. No BatchNorm (per-example gradient penalty)."""

    width: int = 128
    norm: str = "none"  # "none", "layer" or "spectral" (every conv and the Dense)
    dtype: DTypeLike = jnp.float32
    axis_name: str | None = "data"  # the data-parallel axis (spectral norm's state only)
    num_classes: int = 0
    conv_impl: str = "auto"  # `layers.SameConv`'s impl

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        x, labels = split_inputs(x, self.num_classes)
        if self.norm not in CRITIC_NORMS:
            raise ValueError(
                f"ResNetCritic norm must be one of {', '.join(CRITIC_NORMS)}, got {self.norm!r}"
            )
        n = _doublings(8, x.shape[1])
        h = x.astype(self.dtype)
        kinds = ["first"] + ["down"] * (n - 1) + ["none", "none"]
        for i, kind in enumerate(kinds):
            h = _CriticBlock(
                self.width, kind, self.norm, self.dtype, self.axis_name, self.conv_impl,
                name=f"block_{i}"
            )(h, train)
        h = nn.relu(h).mean(axis=(1, 2))
        out = critic_layer(
            nn.Dense(1, dtype=self.dtype), h, norm=self.norm, train=train, axis_name=self.axis_name
        )[:, 0]
        if labels is not None:
            out = projection_score(self, h, out, labels, self.num_classes)
        return out.astype(jnp.float32)
