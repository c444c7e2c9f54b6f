"""What a checkpoint holds and whether it is right: fingerprints, finiteness, the checks of the
data item and of the shapes, reading one checkpoint on this process alone, placing it on the
mesh.

The `data` item of a checkpoint holds a fingerprint of every array of the state
(`FINGERPRINT_KEY`) and one of itself (`DATA_FINGERPRINT_KEY`), so corrupt array bytes (which
the file formats may read back without complaint) and an edited data position are found on
restore. Content that fails to parse or to match raises `CheckpointContentError`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

FINGERPRINT_KEY = "state_fingerprint"  # in the data item: one uint32 per state leaf
DATA_FINGERPRINT_KEY = "data_fingerprint"  # in the data item: a hash of the rest of it


class CheckpointContentError(ValueError):
    """A checkpoint was read but its content is wrong (shape, step, values, fingerprint)."""


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def all_finite(tree: Any) -> bool:
    """Whether every floating-point leaf of `tree` is finite (one device-to-host sync)."""
    return bool(_all_finite(tree))


def _leaf_fingerprint(x: jax.Array) -> jax.Array:
    bits = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    width = bits.dtype.itemsize
    if width == 8:
        bits = jax.lax.bitcast_convert_type(bits, jnp.uint32)  # [..., 2]
    elif not jnp.issubdtype(bits.dtype, jnp.unsignedinteger):
        bits = jax.lax.bitcast_convert_type(bits, jnp.dtype(f"uint{8 * width}"))
    bits = bits.astype(jnp.uint32).ravel()
    # An odd weight per position: changing any one element always changes the sum mod 2**32.
    weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) | jnp.uint32(1)
    return jnp.sum(bits * weights, dtype=jnp.uint32)


@jax.jit
def _fingerprint(tree: Any) -> list[jax.Array]:
    return [_leaf_fingerprint(x) for x in jax.tree.leaves(tree)]


def fingerprint(tree: Any) -> list[int]:
    """One uint32 per leaf of `tree`: a position-weighted sum of its bit patterns.

    Computed on the devices (only the sums are copied), in integer arithmetic, so it is the
    same for the same values on any mesh; any change of a single element changes it.
    """
    return [int(v) for v in jax.device_get(_fingerprint(tree))]


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def data_fingerprint(data: dict[str, Any]) -> str:
    """A hash of the data item without its own fingerprint (its JSON, keys sorted)."""
    rest = {k: v for k, v in data.items() if k != DATA_FINGERPRINT_KEY}
    return hashlib.sha256(canonical_json(rest).encode()).hexdigest()[:32]


def data_item(data_state: dict[str, Any], state: Any) -> dict[str, Any]:
    """The `data` item saved beside `state`: `data_state` (as JSON reads it back) with the
    state's fingerprint and its own."""
    data = json.loads(json.dumps({**data_state, FINGERPRINT_KEY: fingerprint(state)}))
    data[DATA_FINGERPRINT_KEY] = data_fingerprint(data)
    return data


def check_data(data: Any, required: tuple[str, ...]) -> dict[str, Any]:
    """The data item without its fingerprint; `CheckpointContentError` if it is not an object,
    does not match its fingerprint (an edit) or lacks a `required` key. Items saved before
    the data fingerprint existed are checked for the required keys only."""
    if not isinstance(data, dict):
        raise CheckpointContentError("data item is not a JSON object")
    data = dict(data)
    saved = data.pop(DATA_FINGERPRINT_KEY, None)
    if saved is not None and saved != data_fingerprint(data):
        raise CheckpointContentError("data item does not match the fingerprint saved with it "
                                     "(edited or corrupt)")
    missing = [key for key in required if key not in data]
    if missing:
        raise CheckpointContentError(f"data item lacks {', '.join(missing)}")
    return data


def check_shapes(host_state: Any, abstract_state: Any) -> None:
    """`CheckpointContentError` naming the first leaf whose shape or dtype differs."""
    for (path, value), want in zip(jax.tree_util.tree_leaves_with_path(host_state),
                                   jax.tree.leaves(abstract_state), strict=True):
        value = np.asarray(value)
        if value.shape != tuple(want.shape) or value.dtype != want.dtype:
            raise CheckpointContentError(
                f"{jax.tree_util.keystr(path)} was saved as {value.dtype}{list(value.shape)}, "
                f"this run's state has {jnp.dtype(want.dtype)}{list(want.shape)}")


def _check_state(host_state: Any, step: int, expected: list[int] | None) -> list[int]:
    """The state's fingerprint; `CheckpointContentError` if the state holds another step,
    does not match `expected` (corrupt bytes) or holds a non-finite value."""
    saved_step = getattr(host_state, "step", None)
    if saved_step is not None and int(saved_step) != step:
        raise CheckpointContentError(f"holds step {int(saved_step)}")
    found = fingerprint(host_state)
    if expected is not None and found != [int(v) for v in expected]:
        raise CheckpointContentError("array data does not match the fingerprint saved "
                                     "with it (corrupt bytes)")
    if not all_finite(host_state):
        raise CheckpointContentError("holds non-finite values")
    return found


def read_local(
    directory: str, step: int, abstract_state: Any, required_data: tuple[str, ...]
) -> tuple[Any, dict[str, Any], bytes]:
    """Reads and checks checkpoint `step` of `directory` on this process alone, as host arrays.

    No collective runs here (orbax's restore has cross-process barriers, which a process
    whose read fails would leave the others waiting in). Returns (host state, data,
    digest of what was read); raises on an I/O error, and `CheckpointContentError` (or
    the reader's own error) for content that does not parse or does not match.
    """
    path = epath.Path(directory) / str(step)
    data = ocp.JsonCheckpointHandler().restore(path / "data")
    data = check_data(data, required_data)
    expected = data.pop(FINGERPRINT_KEY, None)
    handler = ocp.PyTreeCheckpointHandler()
    try:
        host_state = handler.restore(path / "state", args=ocp.args.PyTreeRestore(
            item=abstract_state,
            restore_args=jax.tree.map(
                lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract_state),
        ))
    finally:
        handler.close()
    check_shapes(host_state, abstract_state)
    found = _check_state(host_state, step, expected)
    digest = hashlib.sha256(
        (canonical_json(data) + json.dumps(found)).encode()).digest()[:16]
    return host_state, data, digest


def place(host_state: Any, abstract_state: Any) -> Any:
    """Host arrays as `jax.Array`s with `abstract_state`'s shardings; each process puts its
    own copy on its own devices (no collective), bit for bit."""
    def put(value: Any, like: Any) -> jax.Array:
        value = np.asarray(value)
        sharding = getattr(like, "sharding", None)
        if sharding is None:
            return jnp.asarray(value)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(put, host_state, abstract_state)
