"""Generators and critics; `build_models(config)` builds the pair a config names.

A config names the built-in networks by `model.kind`, or your own by `model.generator` and
`model.critic`: an import path `"my_pkg.nets:make_generator"` to a factory that is called with
the run's (frozen) config and returns a Flax NNX module, a Flax Linen module or an
`(init, apply)` pair. The trainer, resume and every command build networks here, so a run of
your own networks is rebuilt from its `config.json` alone.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from wgan_jax.config import data_shape
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import ConfigError
from wgan_jax.models.contract import as_model
from wgan_jax.models.dcgan import DCGANCritic, DCGANGenerator
from wgan_jax.models.mlp import MLPCritic, MLPGenerator
from wgan_jax.models.resnet import ResNetCritic, ResNetGenerator

__all__ = ["build_models", "call_factory", "build_builtin_models"]


def build_models(config: ml_collections.ConfigDict) -> tuple[Any, Any]:
    """(generator, critic) of `config`: each from its factory when `model.generator` /
    `model.critic` names one, else the built-in `model.kind`.

    Raises `ConfigError` naming the key when a factory cannot be imported, is not callable,
    raises, or returns something that is not a network.

    It takes the whole config, unlike the modules below the trainer (which take typed
    bundles such as `DataSpec`, `StepConfig`): a user's factory is called with the run's
    frozen config (`ml_collections.FrozenConfigDict`), a public contract, so it may read
    any key, its own ones included.
    """
    generator = call_factory(config, "generator")
    critic = call_factory(config, "critic")
    if generator is None or critic is None:
        built_in_g, built_in_c = build_builtin_models(config)
        generator = built_in_g if generator is None else generator
        critic = built_in_c if critic is None else critic
    return generator, critic


def call_factory(config: ml_collections.ConfigDict, which: str) -> Any | None:
    """The network the factory named by `config.model.<which>` returns, or None if unset."""
    path = config.model[which]
    if not path:
        return None
    key = f"config.model.{which}"
    module_name, _, attribute = path.partition(":")
    try:
        factory: Any = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's to fix
        raise ConfigError(f"{key}: cannot import {module_name!r} ({_one_line(error)})") from None
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise ConfigError(f"{key}: {module_name!r} has no attribute {attribute!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigError(f"{key}: {path} is a {type(factory).__name__}, not a callable factory")
    try:
        network = factory(ml_collections.FrozenConfigDict(config))
    except Exception as error:  # noqa: BLE001 - the user's code failed: say where, in one line
        raise ConfigError(f"{key}: {path}(config) raised {_one_line(error)}") from None
    try:
        return as_model(network)
    except TypeError as error:
        raise ConfigError(f"{key}: {path}(config): {' '.join(str(error).split())}") from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def build_builtin_models(config: ml_collections.ConfigDict) -> tuple[nn.Module, nn.Module]:
    """The built-in (generator, critic) of `config.model.kind`, in `config.compute_dtype`."""
    m = config.model
    dtype = jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32
    classes = num_classes(DataSpec.from_config(config))
    if m.kind == "mlp":
        shape = data_shape(config)
        out_dim = math.prod(shape)
        image_shape = shape if len(shape) == 3 else ()
        return (
            MLPGenerator(
                out_dim, m.width, m.depth, m.generator_norm, dtype=dtype, out_shape=image_shape,
                num_classes=classes,
            ),
            MLPCritic(m.width, m.depth, m.critic_norm, dtype=dtype, num_classes=classes),
        )
    if m.kind == "dcgan":
        return (
            DCGANGenerator(
                config.image_size, config.num_channels, m.width, m.generator_norm,
                conv_impl=m.conv_impl, dtype=dtype, num_classes=classes,
            ),
            DCGANCritic(
                m.width, m.critic_norm, m.critic_output, conv_impl=m.conv_impl, dtype=dtype,
                num_classes=classes,
            ),
        )
    return (
        ResNetGenerator(
            config.image_size, config.num_channels, m.width, m.generator_norm, dtype=dtype,
            num_classes=classes, conv_impl=m.conv_impl,
        ),
        ResNetCritic(m.width, m.critic_norm, dtype=dtype, num_classes=classes,
                     conv_impl=m.conv_impl),
    )
