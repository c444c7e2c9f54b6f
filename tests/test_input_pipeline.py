"""The input pipeline: shapes, determinism, exact restore, and process-independent batches."""

from __future__ import annotations

import numpy as np
import pytest

from wgan_jax.config import get_config_schema
from wgan_jax.data import toy
from wgan_jax.data.spec import DataSpec
from wgan_jax.input_pipeline import ImageStream, _GlobalIndex, create_input_pipeline, local_data
from wgan_jax.step import make_mesh


def _config(dataset: str = "digits", **overrides):
    c = get_config_schema()
    c.dataset = dataset
    if dataset.startswith("toy:"):
        c.model.kind = "mlp"
    else:
        c.model.kind, c.image_size, c.num_channels = "dcgan", 16, 1
    c.global_batch_size, c.n_critic = 32, 2
    for key, value in overrides.items():
        c[key] = value
    return c


def test_toy_batches_are_the_reference_numbers():
    spec = DataSpec.from_config(_config("toy:25gaussians", global_batch_size=256))
    it = create_input_pipeline(spec, make_mesh())
    x = next(it)
    assert x.shape == (2, 256, 2) and x.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(x[1]), toy.toy_batch("25gaussians", 256, 0, 1))
    assert it.data_shape == (2,)


def test_digits_batches_shape_dtype_range_and_sharding():
    it = create_input_pipeline(DataSpec.from_config(_config()), make_mesh())
    x = next(it)
    assert x.shape == (2, 32, 16, 16, 1) and x.dtype == np.float32
    assert float(x.min()) == -1.0 and float(x.max()) <= 1.0
    assert tuple(x.sharding.spec) == (None, "data")
    ref = it.reference_samples(10, 0)
    assert ref.shape == (10, 16, 16, 1) and ref.min() >= -1 and ref.max() <= 1
    assert it.reference_labels(10, 0).shape == (10,)


def test_state_restores_exactly_and_is_json():
    import json

    it = create_input_pipeline(DataSpec.from_config(_config()), make_mesh())
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [np.asarray(next(it)) for _ in range(2)]
    fresh = create_input_pipeline(DataSpec.from_config(_config()), make_mesh())
    fresh.set_state(state)
    for want in expected:
        np.testing.assert_array_equal(np.asarray(next(fresh)), want)


def test_seed_determines_the_stream():
    a = np.asarray(next(create_input_pipeline(DataSpec.from_config(_config()), make_mesh())))
    b = np.asarray(next(create_input_pipeline(DataSpec.from_config(_config()), make_mesh())))
    c = np.asarray(next(create_input_pipeline(DataSpec.from_config(_config(seed=1)), make_mesh())))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("dataset", ["digits", "toy:8gaussians"])
@pytest.mark.parametrize("processes", [2, 4])
def test_process_rows_together_are_the_one_process_batch(dataset, processes):
    spec = DataSpec.from_config(_config(dataset))
    whole = local_data(spec, slice(0, 32)).dataset
    per = 32 // processes
    parts = [local_data(spec, slice(p * per, (p + 1) * per)).dataset for p in range(processes)]
    for k in (0, 1, 70):  # iteration 70 crosses an epoch of the 1797 digits
        joined = np.concatenate([part[k] for part in parts], axis=1)
        np.testing.assert_array_equal(joined, whole[k])


def test_process_splits_are_disjoint_and_cover_each_epoch():
    n, batch, processes = 1797, 64, 4
    per = batch // processes
    stream = ImageStream(range(n), seed=3)
    epochs = []
    for p in range(processes):
        index = _GlobalIndex(batch, slice(p * per, (p + 1) * per))
        globals_ = [index(m) for m in range(per * (2 * n // batch + 2))]
        epochs.append(globals_)
    first_epoch = [g for part in epochs for g in part if g < n]
    assert len(first_epoch) == len(set(first_epoch)) == n  # disjoint, and cover
    assert sorted(stream[g] for g in first_epoch) == list(range(n))
    second = sorted(stream[g] for part in epochs for g in part if n <= g < 2 * n)
    assert second == list(range(n))
    assert [stream[g] for g in range(n)] != [stream[g] for g in range(n, 2 * n)]
