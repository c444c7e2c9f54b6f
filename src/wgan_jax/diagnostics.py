"""In-step statistics of gradients, updates and activations (pure JAX, jit/shard_map friendly).

All functions return float32 scalars (or dicts of them) computed with no I/O, so the train step
can add them to its metrics. Functions that take `axis_name` must then be called inside
`shard_map`/`pmap` over that axis and give the same value on every device; with
`axis_name=None` they describe the local arrays only.

Per-layer keys follow the flattened Flax parameter path without its leading "params" collection
and without the leaf name, e.g. `{"params": {"Dense_0": {"kernel", "bias"}}}` with prefix
"grad_norm/critic" gives "grad_norm/critic/Dense_0" (the norm of kernel and bias together).
"""

from __future__ import annotations

from typing import Any, cast

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["global_norm", "layer_norms", "update_ratios", "dead_fraction", "saturated_fraction",
           "pairwise_diversity", "key_name"]

_COLLECTIONS = ("params", "batch_stats", "intermediates")


def key_name(key: Any) -> str:
    """The name of one pytree path entry (a dict key, attribute name or index)."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _layer_groups(tree: Any) -> dict[str, list[jax.Array]]:
    """Leaves grouped by their owning module's path ("Dense_0", "Block_1/Conv_0", ...)."""
    groups: dict[str, list[jax.Array]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        names = [key_name(k) for k in path]
        if names and names[0] in _COLLECTIONS:
            names = names[1:]
        layer = "/".join(names[:-1]) if len(names) > 1 else (names[0] if names else "")
        groups.setdefault(layer, []).append(leaf)
    return groups


def _sum_squares(leaves: list[jax.Array]) -> jax.Array:
    return cast(jax.Array, sum(jnp.sum(jnp.square(jnp.asarray(x, jnp.float32))) for x in leaves))


def _join(prefix: str, layer: str) -> str:
    return f"{prefix}/{layer}" if layer else prefix


def global_norm(tree: Any) -> jax.Array:
    """L2 norm of all leaves of a pytree together, in float32 (0 for an empty tree)."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    return jnp.sqrt(_sum_squares(leaves))


def layer_norms(tree: Any, prefix: str) -> dict[str, jax.Array]:
    """L2 norm per layer (the module owning kernel/bias/scale), keyed `prefix/Module_path`."""
    return {_join(prefix, layer): jnp.sqrt(_sum_squares(leaves))
            for layer, leaves in _layer_groups(tree).items()}


def update_ratios(
    updates: Any, params: Any, prefix: str, eps: float = 1e-12
) -> dict[str, jax.Array]:
    """Per layer ||update|| / ||param||: how fast each layer moves (healthy Adam runs: ~1e-3).

    `updates` is what the optimizer adds to `params` (same tree structure).
    """
    update_groups = _layer_groups(updates)
    param_groups = _layer_groups(params)
    return {
        _join(prefix, layer): jnp.sqrt(_sum_squares(leaves))
        / (jnp.sqrt(_sum_squares(param_groups[layer])) + eps)
        for layer, leaves in update_groups.items()
        if layer in param_groups
    }


def dead_fraction(activations: Any, axis_name: str | None = None) -> jax.Array:
    """Fraction of units whose (ReLU) output is <= 0 for every example of the global batch.

    `activations`: one array [B, ..., C] or a pytree of them (e.g. the "intermediates" a model
    sowed); a unit is a channel (last axis), so a conv filter counts as dead only if it is
    inactive at every position of every example. With `axis_name`, "every example" spans all
    devices (an exact `pmax` of the per-unit activity), so the result equals the one-device value.
    """
    alive_count = jnp.zeros((), jnp.int32)
    total = 0
    for act in jax.tree_util.tree_leaves(activations):
        act = jnp.asarray(act)
        alive = jnp.any(act > 0, axis=tuple(range(act.ndim - 1))).astype(jnp.int32)
        if axis_name is not None:
            alive = lax.pmax(alive, axis_name)
        alive_count = alive_count + jnp.sum(alive)
        total += act.shape[-1]
    if total == 0:
        return jnp.zeros((), jnp.float32)
    return (total - alive_count).astype(jnp.float32) / total


def saturated_fraction(
    tanh_out: jax.Array, threshold: float = 0.99, axis_name: str | None = None
) -> jax.Array:
    """Fraction of tanh output values with `|y| > threshold` over the global batch.

    With `axis_name`, counts are summed over devices (`psum`), so the result is exact even when
    shards differ in size.
    """
    tanh_out = jnp.asarray(tanh_out, jnp.float32)
    count = jnp.sum(jnp.abs(tanh_out) > threshold).astype(jnp.float32)
    total = jnp.asarray(tanh_out.size, jnp.float32)
    if axis_name is not None:
        count = lax.psum(count, axis_name)
        total = lax.psum(total, axis_name)
    return count / jnp.maximum(total, 1.0)


def _mean_pairwise_distance(x: jax.Array) -> jax.Array:
    """Mean Euclidean distance over ordered pairs i != j of the rows of x ([B, ...])."""
    x = jnp.asarray(x, jnp.float32).reshape(x.shape[0], -1)
    n = x.shape[0]
    if n < 2:
        return jnp.zeros((), jnp.float32)
    x = x - jnp.mean(x, axis=0, keepdims=True)  # distances are shift-invariant; less cancellation
    sq = jnp.sum(jnp.square(x), axis=1)
    gram = jnp.matmul(x, x.T, precision=lax.Precision.HIGHEST)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * gram, 0.0)
    d = jnp.where(jnp.eye(n, dtype=bool), 0.0, jnp.sqrt(d2))
    return jnp.sum(d) / (n * (n - 1))


def pairwise_diversity(
    fake: jax.Array, real: jax.Array, axis_name: str | None = None, eps: float = 1e-12
) -> jax.Array:
    """Mean pairwise distance within `fake` divided by that within `real` (~1 when healthy).

    Distances are taken between the examples of the local shard only (no all-gather); with
    `axis_name` the per-shard mean distances of fake and of real are averaged over devices
    (`pmean`) before dividing. That is an estimate of the same population ratio, not bit-equal
    to the single-device value over the whole batch. A collapsed generator gives values near 0.
    Gradients do not flow through it.
    """
    fake = lax.stop_gradient(fake)
    real = lax.stop_gradient(real)
    d_fake = _mean_pairwise_distance(fake)
    d_real = _mean_pairwise_distance(real)
    if axis_name is not None:
        d_fake = lax.pmean(d_fake, axis_name)
        d_real = lax.pmean(d_real, axis_name)
    return d_fake / (d_real + eps)
