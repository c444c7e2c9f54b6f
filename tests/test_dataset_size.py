"""`dataset_size = N`: training batches come from N fixed examples; too many is a one-line error."""

from __future__ import annotations

import os

import pytest

from wgan_jax import train
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.data.digits import digits_source
from wgan_jax.data.images import SubsetSource, to_float
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import DataError
from wgan_jax.input_pipeline import local_data


def _config(**overrides):
    c = get_config_schema()
    apply_overrides(c, {"dataset": "digits", "model.kind": "mlp", "image_size": 8,
                        "num_channels": 1, "global_batch_size": 20, "n_critic": 1, **overrides})
    return c


def _seen(config, iterations: int) -> set[bytes]:
    """The distinct training examples of the first `iterations` global batches."""
    data = local_data(DataSpec.from_config(config), slice(0, config.global_batch_size))
    return {x.tobytes() for k in range(iterations) for x in data.dataset[k][0]}


def test_training_examples_are_a_fixed_subset_of_size_n():
    everything = {x.tobytes() for x in to_float(digits_source(8).images)}
    small = _seen(_config(dataset_size=30), 6)  # 120 draws: every one of the 30, nothing else
    assert len(small) == 30 and small <= everything
    assert _seen(_config(dataset_size=30, seed=5), 6) == small  # the run's seed: same examples
    assert small <= _seen(_config(dataset_size=60), 12)  # nested: 30 are part of 60
    assert len(_seen(_config(), 6)) > 100  # without it: the whole data set


@pytest.mark.slow
def test_more_than_the_data_is_one_line_and_writes_nothing(tmp_path):
    workdir = str(tmp_path / "run")
    with pytest.raises(DataError, match=r"^config\.dataset_size: 5000 is more than the 1797 ") \
            as e:
        train.train_and_evaluate(_config(dataset_size=5000), workdir)
    assert "\n" not in str(e.value) and not os.path.exists(workdir)


def test_subset_examples_keep_their_labels():
    parent = digits_source(8)
    label_of = {x.tobytes(): y for x, y in zip(parent.images, parent.labels, strict=True)}
    subset = SubsetSource(parent, 40)
    assert [label_of[subset[i].tobytes()] for i in range(40)] == list(subset.labels)
    assert len(set(subset.labels.tolist())) > 5
