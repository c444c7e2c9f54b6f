"""The built-in Flax Linen generators and critics; `build_models(config)` picks the pair a
config names. Like any user network they reach the step through `models.contract.as_model`."""

from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from wgan_jax.config import data_shape
from wgan_jax.models.mlp import MLPCritic, MLPGenerator


def build_models(config: ml_collections.ConfigDict) -> tuple[nn.Module, nn.Module]:
    """(generator, critic) for `config.model`, computing in `config.compute_dtype`."""
    m = config.model
    dtype = jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32
    if m.kind == "mlp":
        shape = data_shape(config)
        out_dim = math.prod(shape)
        image_shape = shape if len(shape) == 3 else ()
        return (
            MLPGenerator(
                out_dim, m.width, m.depth, m.generator_norm, dtype=dtype, out_shape=image_shape
            ),
            MLPCritic(m.width, m.depth, m.critic_norm, dtype=dtype),
        )
    if m.kind == "dcgan":
        from wgan_jax.models.dcgan import DCGANCritic, DCGANGenerator

        return (
            DCGANGenerator(
                config.image_size, config.num_channels, m.width, m.generator_norm,
                conv_impl=m.conv_impl, dtype=dtype,
            ),
            DCGANCritic(
                m.width, m.critic_norm, m.critic_output, conv_impl=m.conv_impl, dtype=dtype
            ),
        )
    from wgan_jax.models.resnet import ResNetCritic, ResNetGenerator

    return (
        ResNetGenerator(
            config.image_size, config.num_channels, m.width, m.generator_norm, dtype=dtype
        ),
        ResNetCritic(m.width, m.critic_norm, dtype=dtype),
    )
