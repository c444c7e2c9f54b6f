"""Networks checked at the door: a wrong generator or critic is one line, before any training.

`check_networks(generator, critic, ...)` runs when a run or an own loop starts
(`train.train_and_evaluate`, `state.create_train_state`), for every kind of network (NNX,
Linen, `(init, apply)` pairs, factories, built-in), and raises `NetworkError` (a
`ConfigError` and a `ValueError`) naming the network, what was expected and what was found:

* the generator maps latents `[B, z_dim]` (with labels `[B]` when conditional) to samples of
  the data's shape `[B, *data_shape]`;
* the critic maps samples `[B, *data_shape]` to scores `[B]` (`[B, 1]` accepted);
* the generator's BatchNorm statistics are the global batch's: a BatchNorm without the step's
  axis name (`axis_name="data"`) is named with the fix;
* the critic's scores are per-example: no BatchNorm, no batch mean (the gradient penalty
  differentiates each score by its own input only, and a coupled critic would give a penalty
  that depends on the device count). Only under an input-gradient penalty (`probe=False`, as
  the trainer passes for penalty "clip" or "none", allows a critic with global-batch
  BatchNorm, as the original WGAN's). `probe=True` checks it numerically for your own critics
  (the built-in ones are per-example by design; the config refuses their BatchNorm): the
  gradient of the first example's score with respect to the other examples must be exactly
  zero.

Shapes are worked out with `jax.eval_shape` (no compute) on a one-device mesh with the step's
axis; only the per-example probe computes (one small backward pass).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import NetworkError
from wgan_jax.models.contract import Model, as_model

__all__ = ["check_gan", "check_networks", "check_run_networks", "as_checked_model"]

PROBE_BATCH = 4


def check_gan(gan: Any, data_shape: Sequence[int], *, axis_name: str = "data",
              names: tuple[str, str] = ("generator", "critic"), probe: bool = True) -> None:
    """`check_networks` for a `state.GAN` (its networks, `z_dim` and `num_classes`)."""
    check_networks(gan.generator, gan.critic, data_shape, gan.z_dim, gan.num_classes,
                   axis_name=axis_name, names=names, probe=probe)


def check_run_networks(config: Any, generator: Any, critic: Any, *,
                       given: tuple[bool, bool] = (False, False), axis_name: str = "data") -> None:
    """The door of a run: `check_networks` with the config's data shape, `z_dim` and classes.

    A network passed as an object is named "generator"/"critic", one from the config
    "config.model.generator"/"config.model.critic" (a factory) or "config.model.kind"
    (built-in). `axis_name`: the step's mesh axis (`wgan_jax.step.AXIS`).
    """
    names = []
    for which, passed in zip(("generator", "critic"), given, strict=True):
        if passed:
            names.append(which)
        elif config.model[which]:
            names.append(f"config.model.{which}")
        else:
            names.append(f"config.model.kind={config.model.kind!r} {which}")
    conditional = config.model.conditional
    for which, name, passed in zip(("generator", "critic"), names, given, strict=True):
        own = passed or bool(config.model[which])
        if conditional == "labels" and not own:
            raise NetworkError(f"{name}: config.model.conditional='labels' gives the labels to "
                               "your own networks; the built-in ones are conditioned with "
                               "'projection' (or give your own " + which + ")")
        if conditional == "projection" and own:
            raise NetworkError(f"{name}: config.model.conditional='projection' is the built-in "
                               "networks' conditioning; your own networks take "
                               "conditional='labels' (they get labels=...)")
    classes = num_classes(DataSpec.from_config(config))
    check_networks(generator, critic, data_shape(config), config.model.z_dim,
                   classes, axis_name=axis_name, names=(names[0], names[1]),
                   probe=config.penalty not in ("clip", "none"))


def as_checked_model(obj: Any, name: str) -> Model:
    """`as_model(obj)`, its `TypeError` turned into a `NetworkError` naming the network."""
    try:
        return as_model(obj)
    except TypeError as error:
        raise NetworkError(f"{name}: {' '.join(str(error).split())}") from None


def check_networks(
    generator: Any, critic: Any, data_shape: Sequence[int], z_dim: int, num_classes: int = 0,
    *, axis_name: str = "data", names: tuple[str, str] = ("generator", "critic"),
    probe: bool = True,
) -> None:
    """Raises `NetworkError` (one line naming the network) unless both networks fit the data.

    `names` are how the networks are called in the message (e.g. "config.model.generator").
    """
    shape = tuple(int(d) for d in data_shape)
    g_name, c_name = names
    gen, crit = as_checked_model(generator, g_name), as_checked_model(critic, c_name)
    mesh = jax.make_mesh((1,), (axis_name,), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.local_devices()[:1])
    b = PROBE_BATCH
    labels = jax.ShapeDtypeStruct((b,), jnp.int32)
    z = jax.ShapeDtypeStruct((b, z_dim), jnp.float32)
    z_in = (z, labels) if num_classes else z
    z_text = f"latents [B, {z_dim}] (z_dim={z_dim})" + (" with labels [B]" if num_classes else "")
    g_params, g_state = _abstract(g_name, gen.init, z_in, z_text)
    out = _abstract_apply(g_name, gen, g_params, g_state, z_in, z_text)
    want = (b, *shape)
    if not hasattr(out, "shape") or tuple(out.shape) != want:
        raise NetworkError(
            f"{g_name}: expected samples [B, {', '.join(map(str, shape))}] (the data's shape) "
            f"from {z_text}, got {_shape_text(out, b)}"
            + _reshape_hint(out, shape))
    _check_global_statistics(g_name, gen, g_params, g_state, z_in, mesh, axis_name, critic=False)

    x = jax.ShapeDtypeStruct(want, jnp.float32)
    x_in = (x, labels) if num_classes else x
    x_text = f"samples [B, {', '.join(map(str, shape))}]" + (
        " with labels [B]" if num_classes else "")
    d_params, d_state = _abstract(c_name, crit.init, x_in, x_text)
    scores = _abstract_apply(c_name, crit, d_params, d_state, x_in, x_text)
    if not hasattr(scores, "shape") or tuple(scores.shape) not in ((b,), (b, 1)):
        hint = " (a mean over the batch? return one score per example)" if (
            hasattr(scores, "shape") and scores.ndim == 0) else ""
        raise NetworkError(f"{c_name}: expected scores [B] (one per example; [B, 1] accepted) "
                           f"for {x_text}, got {_shape_text(scores, b)}{hint}")
    _check_global_statistics(c_name, crit, d_params, d_state, x_in, mesh, axis_name,
                             critic=probe)
    if probe and crit.kind != "builtin":  # the built-in critics are per-example by design
        _check_per_example(c_name, crit, shape, num_classes, axis_name)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split("\n---")[0].split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _shape_text(out: Any, b: int) -> str:
    if not hasattr(out, "shape"):
        return f"a {type(out).__name__}"
    dims = ["B" if i == 0 and d == b else str(d) for i, d in enumerate(out.shape)]
    return f"[{', '.join(dims)}]" if dims else "a scalar []"


def _reshape_hint(out: Any, shape: tuple[int, ...]) -> str:
    if hasattr(out, "shape") and out.ndim == 2 and out.shape[1] == math.prod(shape) \
            and len(shape) > 1:
        return f" (flat: reshape to [B, {', '.join(map(str, shape))}])"
    if hasattr(out, "shape") and out.ndim == len(shape) + 1 and len(shape) == 3:
        return (f" (is the network built for {out.shape[1]} px images? the data has "
                f"{shape[0]} px; set image_size or build it for the data)")
    return ""


def _abstract(name: str, init, example, text: str):
    try:
        return jax.eval_shape(lambda: init(jax.random.PRNGKey(0), _zeros(example)))
    except NetworkError:
        raise
    except Exception as error:  # noqa: BLE001 - the user's network failed: say which, one line
        raise NetworkError(f"{name}: init failed on {text}: {_one_line(error)}") from None


def _abstract_apply(name: str, model: Model, params, state, example, text: str):
    try:
        out, _ = jax.eval_shape(
            lambda p, s: model.apply(p, s, _zeros(example), train=False), params, state)
    except Exception as error:  # noqa: BLE001
        if isinstance(error, TypeError) and "train" in str(error) and model.kind == "linen":
            raise NetworkError(f"{name}: the Linen module's __call__ must take a `train` "
                               "argument (def __call__(self, x, train: bool = True))") from None
        hint = (" (a conditional NNX or Linen module takes them as __call__(self, x, "
                "labels))") if "labels" in text else ""
        raise NetworkError(f"{name}: expected to take {text}{hint}; calling it raised "
                           f"{_one_line(error)}") from None
    return out


def _zeros(example):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), example)


def _check_global_statistics(name, model: Model, params, state, example, mesh, axis, *,
                             critic: bool) -> None:
    """Traces training mode under a one-device `shard_map` whose state must come back
    replicated: statistics computed from this device's examples alone (a BatchNorm without
    `axis_name`) do not."""
    leaves = jax.tree_util.tree_leaves_with_path(state)

    def run(selected):
        def body(p, s, x):
            _, new_state = model.apply(p, s, x, train=True, rng=jax.random.PRNGKey(0))
            return selected(new_state)

        batch_spec = jax.tree.map(lambda _: P(axis), example)
        mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), batch_spec), out_specs=P())
        jax.eval_shape(mapped, params, state, _zeros(example))

    try:
        run(lambda s: s)
        return
    except Exception as error:  # noqa: BLE001
        message = str(error)
        if "out_specs" not in message:
            raise NetworkError(f"{name}: fails in training mode on a mesh whose data axis is "
                               f"{axis!r} (does a BatchNorm or collective name another axis? "
                               f"use axis_name={axis!r}): {_one_line(error)}") from None
    local = []
    for path, _ in leaves:
        try:
            run(lambda s, path=path: _at(s, path))
        except Exception:  # noqa: BLE001 - this leaf is not the global batch's
            local.append(_path_text(path))
    where = ", ".join(local[:4]) or "its state"
    if critic:  # under an input-gradient penalty
        raise NetworkError(f"{name}: has batch statistics ({where}): a critic must not use "
                           "BatchNorm (it couples the examples of a batch, which the gradient "
                           "penalty assumes independent); use LayerNorm or no normalisation")
    raise NetworkError(f"{name}: its BatchNorm statistics ({where}) are each device's own, not "
                       f"the global batch's: give the BatchNorm axis_name={axis!r} "
                       f"(nnx.BatchNorm(..., axis_name={axis!r}) or "
                       f"nn.BatchNorm(..., axis_name={axis!r}))")


def _at(tree, path):
    for key in path:
        tree = tree[getattr(key, "key", getattr(key, "idx", key))]
    return tree


def _path_text(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _check_per_example(name: str, model: Model, shape, num_classes, axis) -> None:
    """The gradient of example 0's score with respect to examples 1.. must be exactly zero."""
    b = PROBE_BATCH
    x = jax.random.normal(jax.random.PRNGKey(1), (b, *shape), jnp.float32)
    labels = jnp.arange(b, dtype=jnp.int32) % max(num_classes, 1)
    example: Any = (x, labels) if num_classes else x
    params, state = jax.jit(model.init)(jax.random.PRNGKey(0), example)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((params, state))):
        return  # under a trace (e.g. jax.eval_shape of create_train_state): nothing to compute

    def first_score(x):
        inputs = (x, labels) if num_classes else x
        scores, _ = model.apply(params, state, inputs, train=True, rng=jax.random.PRNGKey(0))
        return jnp.reshape(scores, (b,))[0].astype(jnp.float32)

    # Under a one-element vmap that binds the step's axis name, so that a cross-device
    # BatchNorm runs as on one device.
    one = jax.jit(jax.vmap(jax.grad(first_score), axis_name=axis))
    grads = np.asarray(one(x[None]))[0]
    others = float(np.max(np.abs(grads[1:])))
    if others != 0.0 or not np.all(np.isfinite(grads)):
        raise NetworkError(f"{name}: expected per-example scores (example 0's score independent "
                           f"of the batch's other examples), found a gradient of "
                           f"{others:.3g} with respect to the others: remove BatchNorm or batch "
                           "means from the critic (use LayerNorm or no normalisation)")
