"""A user's own networks, as a package outside wgan_jax would hold them (tests only).

Named in configs as `own_nets:FACTORY` (the tests put this directory on the import path). Every
factory takes the run's config and reads `model.z_dim` and the image shape from it. The layer
names (`my_*`) are the user's, so a test can find them in a checkpoint.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx


def _image_shape(config) -> tuple[int, int, int]:
    return (config.image_size, config.image_size, config.num_channels)


class NNXGenerator(nnx.Module):
    """z -> Linear -> BatchNorm over the global batch ("data" axis) -> ReLU -> Linear -> tanh."""

    def __init__(self, z_dim: int, shape: tuple[int, ...], width: int, rngs: nnx.Rngs):
        self.shape = shape
        self.my_hidden = nnx.Linear(z_dim, width, use_bias=False, rngs=rngs)
        self.my_norm = nnx.BatchNorm(width, axis_name="data", rngs=rngs)
        self.my_pixels = nnx.Linear(width, math.prod(shape), rngs=rngs)

    def __call__(self, z: jax.Array) -> jax.Array:
        h = nnx.relu(self.my_norm(self.my_hidden(z)))
        return jnp.tanh(self.my_pixels(h)).reshape((z.shape[0], *self.shape))


class NNXCritic(nnx.Module):
    """x -> flatten -> Linear -> leaky ReLU -> Linear -> one score per example."""

    def __init__(self, shape: tuple[int, ...], width: int, rngs: nnx.Rngs):
        self.my_features = nnx.Linear(math.prod(shape), width, rngs=rngs)
        self.my_score = nnx.Linear(width, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.leaky_relu(self.my_features(x.reshape((x.shape[0], -1))), 0.2)
        return self.my_score(h)[:, 0]


def nnx_generator(config) -> NNXGenerator:
    return NNXGenerator(config.model.z_dim, _image_shape(config), config.model.width,
                        nnx.Rngs(config.seed))


def nnx_critic(config) -> NNXCritic:
    return NNXCritic(_image_shape(config), config.model.width, nnx.Rngs(config.seed + 1))


class LinenGenerator(nn.Module):
    shape: tuple[int, ...]
    width: int

    @nn.compact
    def __call__(self, z, train: bool = True):
        h = nn.Dense(self.width, use_bias=False, name="my_linen_hidden")(z)
        h = nn.BatchNorm(use_running_average=not train, axis_name="data", name="my_linen_norm")(h)
        x = nn.Dense(math.prod(self.shape), name="my_linen_pixels")(nn.relu(h))
        return jnp.tanh(x).reshape((z.shape[0], *self.shape))


class LinenCritic(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, train: bool = True):
        h = nn.Dense(self.width, name="my_linen_features")(x.reshape((x.shape[0], -1)))
        return nn.Dense(1, name="my_linen_score")(nn.leaky_relu(h, 0.2))[:, 0]


def linen_generator(config) -> LinenGenerator:
    return LinenGenerator(_image_shape(config), config.model.width)


def linen_critic(config) -> LinenCritic:
    return LinenCritic(config.model.width)


def _dense_init(rng, n_in: int, n_out: int) -> dict:
    return {"w": jax.random.normal(rng, (n_in, n_out)) / math.sqrt(n_in), "b": jnp.zeros(n_out)}


def plain_generator(config):
    """An (init, apply) pair of plain functions: z -> tanh(relu(z W1) W2), no state."""
    z_dim, shape, width = config.model.z_dim, _image_shape(config), config.model.width

    def init(rng, example):
        del example
        k1, k2 = jax.random.split(rng)
        params = {"my_plain_in": _dense_init(k1, z_dim, width),
                  "my_plain_out": _dense_init(k2, width, math.prod(shape))}
        return params, {}

    def apply(params, state, z, *, train, rng=None):
        del train, rng
        h = jax.nn.relu(z @ params["my_plain_in"]["w"] + params["my_plain_in"]["b"])
        x = jnp.tanh(h @ params["my_plain_out"]["w"] + params["my_plain_out"]["b"])
        return x.reshape((z.shape[0], *shape)), state

    return init, apply


def plain_critic(config):
    """An (init, apply) pair: flatten -> leaky ReLU layer -> one score per example."""
    n_in, width = math.prod(_image_shape(config)), config.model.width

    def init(rng, example):
        del example
        k1, k2 = jax.random.split(rng)
        return {"my_plain_features": _dense_init(k1, n_in, width),
                "my_plain_score": _dense_init(k2, width, 1)}, {}

    def apply(params, state, x, *, train, rng=None):
        del train, rng
        h = x.reshape((x.shape[0], -1)) @ params["my_plain_features"]["w"]
        h = jax.nn.leaky_relu(h + params["my_plain_features"]["b"], 0.2)
        return (h @ params["my_plain_score"]["w"] + params["my_plain_score"]["b"])[:, 0], state

    return init, apply


def raises(config):
    raise ValueError(f"no network for z_dim={config.model.z_dim}")


def not_a_network(config):
    return {"z_dim": config.model.z_dim}


NOT_CALLABLE = 42


# Wrong networks, for the checks at the door (tests/test_own_checks.py): each case exists as
# an NNX module, a Linen module and an (init, apply) pair, built for 8x8x1 data and z_dim 8
# unless the case is about one of them.
DATA, Z = (8, 8, 1), 8


class CaseNNXGenerator(nnx.Module):
    def __init__(self, z_dim=Z, shape=DATA, axis_name="data", *, rngs=None):
        rngs = rngs or nnx.Rngs(0)
        self.shape = shape
        self.hidden = nnx.Linear(z_dim, 16, rngs=rngs)
        self.norm = nnx.BatchNorm(16, axis_name=axis_name, rngs=rngs)
        self.pixels = nnx.Linear(16, math.prod(shape), rngs=rngs)

    def __call__(self, z):
        h = nnx.relu(self.norm(self.hidden(z)))
        return jnp.tanh(self.pixels(h)).reshape((z.shape[0], *self.shape))


class CaseNNXCritic(nnx.Module):
    def __init__(self, norm=None, outputs=1, mean=False, *, rngs=None):
        rngs = rngs or nnx.Rngs(1)
        self.features = nnx.Linear(math.prod(DATA), 16, rngs=rngs)
        self.norm = nnx.BatchNorm(16, axis_name=norm, rngs=rngs) if norm is not False else None
        self.score = nnx.Linear(16, outputs, rngs=rngs)
        self.outputs, self.mean = outputs, mean

    def __call__(self, x):
        h = self.features(x.reshape((x.shape[0], -1)))
        if self.norm is not None:
            h = self.norm(h)
        s = self.score(nnx.leaky_relu(h, 0.2))
        s = s[:, 0] if self.outputs == 1 else s
        return jnp.mean(s) if self.mean else s


class CaseLinenGenerator(nn.Module):
    shape: tuple[int, ...] = DATA
    axis_name: str | None = "data"

    @nn.compact
    def __call__(self, z, train: bool = True):
        h = nn.Dense(16)(z)
        h = nn.BatchNorm(use_running_average=not train, axis_name=self.axis_name)(h)
        x = nn.Dense(math.prod(self.shape))(nn.relu(h))
        return jnp.tanh(x).reshape((z.shape[0], *self.shape))


class CaseLinenCritic(nn.Module):
    norm: bool = False
    outputs: int = 1
    mean: bool = False

    @nn.compact
    def __call__(self, x, train: bool = True):
        h = nn.Dense(16)(x.reshape((x.shape[0], -1)))
        if self.norm:
            h = nn.BatchNorm(use_running_average=not train)(h)
        s = nn.Dense(self.outputs)(nn.leaky_relu(h, 0.2))
        s = s[:, 0] if self.outputs == 1 else s
        return jnp.mean(s) if self.mean else s


class LinenWithoutTrain(nn.Module):
    @nn.compact
    def __call__(self, z):
        return jnp.tanh(nn.Dense(math.prod(DATA))(z)).reshape((z.shape[0], *DATA))


def case_pair_generator(z_dim=Z, shape=DATA, local_statistics=False):
    """(init, apply) generator; `local_statistics`: a hand-made BatchNorm without pmean."""

    def init(rng, example):
        del example
        return {"w": jax.random.normal(rng, (z_dim, math.prod(shape))) / 3}, {"mean": jnp.zeros(())}

    def apply(params, state, z, *, train, rng=None):
        del rng
        h = z @ params["w"]
        if local_statistics and train:
            state = {"mean": jnp.mean(h)}
        return jnp.tanh(h - state["mean"]).reshape((z.shape[0], *shape)), state

    return init, apply


def case_pair_critic(center=False, outputs=1, mean=False):
    """(init, apply) critic; `center` subtracts the batch mean (couples the examples)."""

    def init(rng, example):
        del example
        return {"w": jax.random.normal(rng, (math.prod(DATA), outputs))}, {}

    def apply(params, state, x, *, train, rng=None):
        del train, rng
        h = x.reshape((x.shape[0], -1))
        if center:
            h = h - jnp.mean(h, axis=0)
        s = h @ params["w"]
        s = s[:, 0] if outputs == 1 else s
        return (jnp.mean(s) if mean else s), state

    return init, apply


def bad_critic_batchnorm(config):
    return CaseNNXCritic(norm=None)


def bad_generator_image_size(config):
    return CaseNNXGenerator(config.model.z_dim, (16, 16, 1))


def bad_generator_class(config):
    return CaseNNXGenerator


class ConditionalNNXGenerator(nnx.Module):
    """(z, labels) -> 2-D points: the label's embedding joins z, BatchNorm over "data"."""

    def __init__(self, z_dim: int, num_classes: int, out_dim: int = 2, width: int = 64, *,
                 rngs: nnx.Rngs):
        self.embed = nnx.Embed(num_classes, 8, rngs=rngs)
        self.hidden = nnx.Linear(z_dim + 8, width, use_bias=False, rngs=rngs)
        self.norm = nnx.BatchNorm(width, axis_name="data", use_fast_variance=False, rngs=rngs)
        self.out = nnx.Linear(width, out_dim, rngs=rngs)

    def __call__(self, z, labels):
        h = jnp.concatenate([z, self.embed(labels)], axis=-1)
        return self.out(nnx.relu(self.norm(self.hidden(h))))


class ConditionalNNXCritic(nnx.Module):
    """(x, labels) -> scores [B]: an MLP's score plus a projection <embed(labels), features>."""

    def __init__(self, in_dim: int, num_classes: int, width: int = 64, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(in_dim, width, rngs=rngs)
        self.embed = nnx.Embed(num_classes, width, rngs=rngs)
        self.score = nnx.Linear(width, 1, rngs=rngs)

    def __call__(self, x, labels):
        h = nnx.leaky_relu(self.hidden(x.reshape((x.shape[0], -1))), 0.2)
        return self.score(h)[:, 0] + jnp.sum(self.embed(labels) * h, axis=-1)


class ConditionalImages(nnx.Module):
    """A `ConditionalNNXGenerator` whose outputs are `[B, H, W, C]` images in [-1, 1]."""

    def __init__(self, inner: ConditionalNNXGenerator, shape: tuple[int, int, int]):
        self.inner, self.shape = inner, shape

    def __call__(self, z, labels):
        return jnp.tanh(self.inner(z, labels)).reshape((z.shape[0], *self.shape))


def conditional_generator(config) -> ConditionalImages:
    """Factory (`model.generator`) of an own conditional image generator (labels=...), for
    `model.num_classes` classes."""
    shape = _image_shape(config)
    inner = ConditionalNNXGenerator(config.model.z_dim, config.model.num_classes,
                                    out_dim=math.prod(shape), rngs=nnx.Rngs(config.seed))
    return ConditionalImages(inner, shape)


def conditional_critic(config) -> ConditionalNNXCritic:
    """Factory (`model.critic`) of an own conditional critic (labels=...)."""
    return ConditionalNNXCritic(math.prod(_image_shape(config)), config.model.num_classes,
                                rngs=nnx.Rngs(config.seed + 1))
