"""Input pipelines: host batches in, global `jax.Array`s sharded on the `data` mesh out.

Each iteration yields `[n_critic, global_batch, *data_shape]`: the `n_critic` real batches of
one generator iteration. Every process builds only its own rows and the global array is
assembled with `jax.make_array_from_process_local_data`. An iterator's position is a small
JSON-able dict, so a checkpoint can restore it exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.config import data_shape
from wgan_jax.data import toy

BatchFn = Callable[[int], np.ndarray]  # global batch index -> this process's rows


class DataIterator:
    """Yields global batches `[n_critic, B, *shape]` from `batch_fn(index)`; position = index."""

    def __init__(
        self,
        batch_fn: BatchFn,
        mesh: Mesh,
        global_batch: int,
        n_critic: int,
        shape: tuple[int, ...],
        reference_fn: Callable[[int, int], np.ndarray],
    ) -> None:
        self._batch_fn = batch_fn
        self._n_critic = n_critic
        self._global_shape = (n_critic, global_batch, *shape)
        self._sharding = NamedSharding(mesh, P(None, "data"))
        self._reference_fn = reference_fn
        self.data_shape = shape
        self.position = 0  # generator iterations served

    def __iter__(self) -> DataIterator:
        return self

    def next_local(self) -> np.ndarray:
        """This process's rows of the next iteration, on the host."""
        first = self.position * self._n_critic
        local = np.stack([self._batch_fn(first + j) for j in range(self._n_critic)])
        self.position += 1
        return local

    def __next__(self) -> jax.Array:
        return jax.make_array_from_process_local_data(
            self._sharding, self.next_local(), self._global_shape
        )

    def get_state(self) -> dict[str, Any]:
        return {"position": self.position}

    def set_state(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])

    def reference_samples(self, n: int, seed: int = 0) -> np.ndarray:
        """n real examples, independent of the training stream (for plots and metrics)."""
        return self._reference_fn(n, seed)


def _process_rows(global_batch: int) -> slice:
    count, index = jax.process_count(), jax.process_index()
    per = global_batch // count
    return slice(index * per, (index + 1) * per)


def create_input_pipeline(config: ml_collections.ConfigDict, mesh: Mesh) -> DataIterator:
    """The iterator for `config.dataset` (see `wgan_jax.config` for the names)."""
    kind, _, name = config.dataset.partition(":")
    batch, seed = config.global_batch_size, config.seed
    rows = _process_rows(batch)
    if kind == "toy":

        def batch_fn(index: int) -> np.ndarray:
            return toy.toy_batch(name, batch, seed, index)[rows]

        def reference_fn(n: int, ref_seed: int) -> np.ndarray:
            return toy.toy_samples(name, n, ref_seed + 1000)

    else:
        from wgan_jax.data import images

        source = images.make_image_source(config)

        def batch_fn(index: int) -> np.ndarray:
            return source.batch(index, batch, seed)[rows]

        def reference_fn(n: int, ref_seed: int) -> np.ndarray:
            return source.samples(n, ref_seed)

    return DataIterator(
        batch_fn, mesh, batch, config.n_critic, data_shape(config), reference_fn
    )
