"""Input pipelines: host batches in, global `jax.Array`s sharded on the `data` mesh out.

Each iteration yields `[n_critic, global_batch, *data_shape]`: the `n_critic` real batches of
one generator iteration. What a global batch holds never depends on the number of processes or
devices:

* images: the examples form one endless stream, epoch after epoch, each epoch a seeded
  permutation of the dataset (a different permutation per epoch, `ImageStream`); global
  batch `k` is stream elements `[k * B, (k + 1) * B)`;
* toy data: global batch `k` is `toy.toy_batch(name, B, seed, k)`, a pure function.

Every process reads only its own rows of each global batch (the rows its devices hold in the
`P(None, "data")` sharding: disjoint, and together the whole batch), and the global array is
assembled with `jax.make_array_from_process_local_data`. Host batches are built ahead of use by
grain's reader threads, so the step does not wait for decoding. Since every element is a pure
function of its index, an iterator's position is one integer (`get_state`/`set_state`), and a
checkpoint restores it exactly. The state also records the global batch and `n_critic` that
counted it: an image stream resumed with other values continues at the same example when that
example starts a new iteration (`position * n_critic * global_batch` examples were used), and
is refused otherwise; toy batches are a function of the batch size, so a toy run refuses any
change.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import grain
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from wgan_jax.data import images, sources, toy
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import DataError

__all__ = ["create_input_pipeline", "DataIterator", "label_frequencies"]

log = logging.getLogger("wgan_jax")

_ENDLESS = sys.maxsize // 2**20  # iterations: more than any run, small enough to index
_THREADS = max(2, min(8, os.cpu_count() or 2))  # decoding threads (PIL releases the GIL)
IMAGE_READ = grain.ReadOptions(num_threads=_THREADS, prefetch_buffer_size=_THREADS)
TOY_READ = grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)


def local_rows(sharding: NamedSharding, global_shape: tuple[int, ...]) -> slice:
    """The rows of the batch axis (axis 1) that this process's devices hold, as one slice."""
    spans = sorted(
        {
            (index[1].start or 0, global_shape[1] if index[1].stop is None else index[1].stop)
            for index in cast(dict[Any, tuple[slice, ...]],
                              sharding.addressable_devices_indices_map(global_shape)).values()
        }
    )
    for (_, stop), (start, _) in zip(spans, spans[1:], strict=False):
        if stop != start:
            raise ValueError(f"this process's batch rows are not contiguous: {spans}")
    return slice(spans[0][0], spans[-1][1])


class DataIterator:
    """Yields global batches `[n_critic, B, *shape]`; position = generator iterations served.

    With `class_frequencies` (a conditional run) it yields `(images, labels)`, the int32 labels
    `[n_critic, B]` sharded like the images.

    `local` is a grain `MapDataset` whose element `k` is this process's rows of iteration `k`,
    float32 `[n_critic, rows, *shape]`.
    """

    def __init__(
        self,
        local: grain.MapDataset,
        mesh: Mesh,
        global_batch: int,
        n_critic: int,
        shape: tuple[int, ...],
        reference_fn: Callable[[int, int], np.ndarray],
        read_options: grain.ReadOptions = IMAGE_READ,
        labels_fn: Callable[[int, int], np.ndarray | None] | None = None,
        example_stream: bool = True,
        class_frequencies: tuple[float, ...] = (),
    ) -> None:
        self._local = local
        self.class_frequencies = class_frequencies  # () unless batches carry labels
        self._example_stream = example_stream  # iterations are consecutive runs of examples
        self._global_shape = (n_critic, global_batch, *shape)
        self._sharding = NamedSharding(mesh, P(None, "data"))
        self._reference_fn = reference_fn
        self._labels_fn = labels_fn
        self._read = read_options
        self._iter: Any = None
        self.data_shape = shape
        self.position = 0

    def __iter__(self) -> DataIterator:
        return self

    def _reader(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._local[self.position :].to_iter_dataset(self._read))
        return self._iter

    def next_local(self) -> np.ndarray:
        """This process's rows of the next iteration, on the host."""
        local = next(self._reader())
        self.position += 1
        return local

    def __next__(self) -> jax.Array | tuple[jax.Array, jax.Array]:
        local = self.next_local()
        if not self.class_frequencies:
            return jax.make_array_from_process_local_data(
                self._sharding, local, self._global_shape
            )
        images, labels = local
        return (
            jax.make_array_from_process_local_data(self._sharding, images, self._global_shape),
            jax.make_array_from_process_local_data(
                self._sharding, labels, self._global_shape[:2]),
        )

    def get_state(self) -> dict[str, Any]:
        """The position to continue from, with the batch shape it counts in (JSON)."""
        n_critic, batch = self._global_shape[:2]
        return {"position": self.position, "global_batch": batch, "n_critic": n_critic}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues at a saved position (see the module docstring for a changed batch)."""
        n_critic, batch = self._global_shape[:2]
        position = _map_position(state, n_critic, batch, self._example_stream)
        if position != int(state["position"]):
            log.info("data position %d (global_batch_size=%s, n_critic=%s) continues as position "
                     "%d of this run's iterations", int(state["position"]),
                     state.get("global_batch"), state.get("n_critic"), position)
        if position != self.position or self._iter is None:
            self.close()
            self.position = position

    def close(self) -> None:
        """Stops the reader threads (a new reader starts at `position` when needed)."""
        if self._iter is not None and hasattr(self._iter, "close"):
            self._iter.close()
        self._iter = None

    def reference_samples(self, n: int, seed: int = 0) -> np.ndarray:
        """n real examples, independent of the training stream (for plots and metrics)."""
        return self._reference_fn(n, seed)

    def reference_labels(self, n: int, seed: int = 0) -> np.ndarray | None:
        """Class labels of `reference_samples(n, seed)` (`[n, 3]` for stacked digits), or None."""
        return None if self._labels_fn is None else self._labels_fn(n, seed)


def _map_position(
    state: dict[str, Any], n_critic: int, batch: int, example_stream: bool
) -> int:
    """The position, in this iterator's iterations, of a saved state; `DataError` if inexact.

    States without `global_batch` (older checkpoints, rollbacks to step 0) are taken as is.
    """
    position = int(state["position"])
    saved_batch = int(state.get("global_batch", batch))
    saved_critic = int(state.get("n_critic", n_critic))
    if (saved_batch, saved_critic) == (batch, n_critic):
        return position
    examples = position * saved_critic * saved_batch
    was = (f"the checkpoint's data position was counted with global_batch_size={saved_batch}, "
           f"n_critic={saved_critic} (this run: {batch}, {n_critic})")
    if not example_stream:
        raise DataError(f"{was}; toy batches depend on the batch size, so the position cannot "
                        "be carried over: resume with the original values or use a new --workdir")
    if examples % (n_critic * batch):
        raise DataError(f"{was}; its {examples} examples used are not a whole number of this "
                        f"run's iterations of {n_critic * batch}: resume with the original values "
                        "or use a new --workdir")
    return examples // (n_critic * batch)


class _ToyIteration:
    def __init__(self, name: str, batch: int, seed: int, n_critic: int, rows: slice) -> None:
        self.name, self.batch, self.seed = name, batch, seed
        self.n_critic, self.rows = n_critic, rows

    def __call__(self, k: int) -> np.ndarray:
        first = k * self.n_critic
        return np.stack([
            toy.toy_batch(self.name, self.batch, self.seed, first + j)[self.rows]
            for j in range(self.n_critic)
        ])


class _GlobalIndex:
    """Local example m of this process -> its index in the global example stream."""

    def __init__(self, batch: int, rows: slice) -> None:
        self.batch, self.start, self.per = batch, rows.start, rows.stop - rows.start

    def __call__(self, m: int) -> int:
        return (m // self.per) * self.batch + self.start + m % self.per


def _sample_indices(length: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 7919])
    return rng.permutation(length)[:n] if n <= length else rng.integers(0, length, n)


class ImageStream:
    """The endless global example stream: element g is `source[perm_e[g % n]]`, e = g // n.

    `perm_e` is numpy's permutation of the n indices seeded by (seed, e): one vectorised
    permutation per epoch, cached, instead of a per-element shuffle lookup (grain's `shuffle`
    spent ~70 us per element, a third of a small model's step). Thread-safe for grain's readers.
    """

    def __init__(self, source: Any, seed: int, labels: np.ndarray | None = None) -> None:
        self.source, self.seed, self.n = source, seed % 2**32, len(source)
        self.labels = labels
        self._permutation = functools.lru_cache(maxsize=2)(self._epoch_permutation)

    def _epoch_permutation(self, epoch: int) -> np.ndarray:
        dtype = np.int32 if self.n < 2**31 else np.int64
        return np.random.default_rng([self.seed, epoch]).permutation(self.n).astype(dtype)

    def __getitem__(self, g: int) -> Any:
        epoch, position = divmod(int(g), self.n)
        return self.source[int(self._permutation(epoch)[position])]

    def label(self, g: int) -> int:
        """The class label of element g (streams given `labels`, the class of each example)."""
        epoch, position = divmod(int(g), self.n)
        assert self.labels is not None  # a labelled stream
        return int(self.labels[int(self._permutation(epoch)[position])])


class LocalData(NamedTuple):
    """What one process reads: its rows of every iteration, and reference examples."""

    dataset: grain.MapDataset  # element k: float32 [n_critic, rows, *shape] of iteration k
    reference_fn: Callable[[int, int], np.ndarray]
    labels_fn: Callable[[int, int], np.ndarray] | None
    read_options: grain.ReadOptions
    class_frequencies: tuple[float, ...] = ()  # conditional runs: element k is (images, labels)


def local_data(spec: DataSpec, rows: slice) -> LocalData:
    """The `rows` of every global batch of `spec.dataset` (a pure function of the spec)."""
    kind, name = spec.kind, spec.name
    batch, seed, n_critic = spec.global_batch_size, spec.seed, spec.n_critic
    shape = spec.shape
    if kind == "toy":
        if name not in toy.MIXTURES and name not in ("swissroll", "25gaussians"):
            raise DataError(f"unknown toy dataset {name!r}")
        iteration = _ToyIteration(name, batch, seed, n_critic, rows)

        def toy_reference(n: int, ref_seed: int) -> np.ndarray:
            return toy.toy_samples(name, n, ref_seed + 1000)

        return LocalData(
            grain.MapDataset.range(_ENDLESS).map(iteration), toy_reference, None, TOY_READ
        )

    source = sources.make_image_source(spec)
    if len(source) == 0:
        raise DataError(f"{spec.dataset}: the dataset is empty")
    # `dataset_size` restricts the training stream; reference examples (plots, in-training
    # evaluation) still come from the whole data set.
    size = spec.dataset_size
    train_source = images.SubsetSource(source, size) if size else source
    classes = sources.num_classes(spec)
    train_labels = sources.class_labels(spec, train_source) if classes else None
    stream = ImageStream(train_source, seed, train_labels)
    per = rows.stop - rows.start
    indices = grain.MapDataset.range(_ENDLESS * n_critic * per).map(_GlobalIndex(batch, rows))
    frequencies = () if train_labels is None else label_frequencies(train_labels, classes)
    if frequencies:
        dataset = (
            indices.map(lambda g: (stream[g], np.int32(stream.label(g))))
            .batch(n_critic * per)
            .map(lambda b: (images.to_float(b[0]).reshape(n_critic, per, *shape),
                            b[1].reshape(n_critic, per)))
        )
    else:
        dataset = (
            indices.map(lambda g: stream[g])
            .batch(n_critic * per)
            .map(lambda b: images.to_float(b).reshape(n_critic, per, *shape))
        )

    def reference_fn(n: int, ref_seed: int) -> np.ndarray:
        indices = _sample_indices(len(source), n, ref_seed)
        return images.to_float(np.stack([source[int(i)] for i in indices]))

    labels = getattr(source, "labels", None)
    labels_fn = None
    if labels is not None:

        def labels_fn(n: int, ref_seed: int) -> np.ndarray:
            return np.asarray(labels)[_sample_indices(len(source), n, ref_seed)]

    return LocalData(dataset, reference_fn, labels_fn, IMAGE_READ, frequencies)


def label_frequencies(labels: np.ndarray, classes: int) -> tuple[float, ...]:
    """The share of each of `classes` classes among int `labels`; `DataError` for a label
    outside 0..classes-1 (data that do not match their own metadata)."""
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise DataError(f"the data's labels span {labels.min()}..{labels.max()}, outside the "
                        f"{classes} classes 0..{classes - 1} of its metadata")
    counts = np.bincount(labels, minlength=classes)
    return tuple(float(c) for c in counts / counts.sum())


def create_input_pipeline(spec: DataSpec, mesh: Mesh) -> DataIterator:
    """The iterator for `spec.dataset` (see `wgan_jax.config` for the names; build the spec
    from a config with `DataSpec.from_config`).

    Raises `DataError` (one line) for a dataset that cannot be found, read or converted.
    """
    batch, n_critic, shape = spec.global_batch_size, spec.n_critic, spec.shape
    rows = local_rows(NamedSharding(mesh, P(None, "data")), (n_critic, batch, *shape))
    data = local_data(spec, rows)
    return DataIterator(
        data.dataset, mesh, batch, n_critic, shape, data.reference_fn, data.read_options,
        data.labels_fn, example_stream=not spec.dataset.startswith("toy:"),
        class_frequencies=data.class_frequencies,
    )
