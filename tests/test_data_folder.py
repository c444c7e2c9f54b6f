"""folder:/path datasets: conversion (RGBA kept), caching, and one-line errors."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from PIL import Image

from wgan_jax.config import get_config_schema
from wgan_jax.data import folder
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import DataError
from wgan_jax.input_pipeline import create_input_pipeline
from wgan_jax.step import make_mesh


def _write_images(root, n: int = 6) -> None:
    rng = np.random.default_rng(0)
    (root / "cats").mkdir(parents=True)
    (root / "dogs").mkdir()
    for i in range(n):
        rgba = rng.integers(0, 256, (64, 64, 4), dtype=np.uint8)
        rgba[:32, :, 3] = 0  # a transparent half
        Image.fromarray(rgba, "RGBA").save(root / "cats" / f"sprite_{i}.png")
    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(root / "dogs" / "a.jpg")
    Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8), "L").save(root / "g.PNG")


def _config(path, data_dir, channels: int = 4, size: int = 16):
    c = get_config_schema()
    c.dataset = f"folder:{path}"
    c.data_dir = str(data_dir)
    c.model.kind, c.image_size, c.num_channels = "dcgan", size, channels
    c.global_batch_size, c.n_critic = 4, 2
    return c


@pytest.mark.parametrize("channels", [4, 3, 1])
def test_folder_batches(tmp_path, channels):
    _write_images(tmp_path / "imgs")
    before = sorted(os.listdir(tmp_path / "imgs"))
    spec = DataSpec.from_config(_config(tmp_path / "imgs", tmp_path / "data", channels))
    it = create_input_pipeline(spec, make_mesh())
    x = np.asarray(next(it))
    assert x.shape == (2, 4, 16, 16, channels) and x.dtype == np.float32
    assert x.min() >= -1 and x.max() <= 1
    assert sorted(os.listdir(tmp_path / "imgs")) == before  # nothing written into the folder
    ref = it.reference_samples(8, 0)
    assert ref.shape == (8, 16, 16, channels)


def test_rgba_sprites_are_kept_exactly(tmp_path):
    _write_images(tmp_path / "imgs")
    source = folder.folder_source(str(tmp_path / "imgs"), str(tmp_path / "data"), 64, 4)
    assert len(source) == 8  # sorted: cats/sprite_0..5.png, dogs/a.jpg, g.PNG
    for i in range(6):
        with Image.open(tmp_path / "imgs" / "cats" / f"sprite_{i}.png") as img:
            np.testing.assert_array_equal(source[i], np.asarray(img))
    assert (source[6][..., 3] == 255).all() and (source[7][..., 3] == 255).all()


def test_conversion_is_cached_and_redone_when_files_change(tmp_path):
    _write_images(tmp_path / "imgs")
    args = (str(tmp_path / "imgs"), str(tmp_path / "data"), 16, 4)
    folder.folder_source(*args)
    out = folder.prepared_dir(str(tmp_path / "imgs"), *args[1:])
    stamp = os.stat(os.path.join(out, folder.META)).st_mtime_ns
    folder.folder_source(*args)
    assert os.stat(os.path.join(out, folder.META)).st_mtime_ns == stamp
    Image.new("RGB", (20, 20)).save(tmp_path / "imgs" / "new.png")
    assert len(folder.folder_source(*args)) == 9
    assert len(os.listdir(tmp_path / "data" / "folders")) == 2


def test_empty_and_missing_folders(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(DataError, match="no PNG or JPEG"):
        folder.folder_source(str(tmp_path / "empty"), str(tmp_path / "data"), 16, 3)
    with pytest.raises(DataError, match="no such directory"):
        folder.folder_source(str(tmp_path / "nope"), str(tmp_path / "data"), 16, 3)


def _with_corrupt(root) -> None:
    _write_images(root)
    (root / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    good = (root / "g.PNG").read_bytes()
    (root / "truncated.png").write_bytes(good[: len(good) // 2])


def test_corrupt_image_is_an_error_naming_the_file(tmp_path):
    _with_corrupt(tmp_path / "imgs")
    with pytest.raises(DataError, match="bad.png") as error:
        folder.folder_source(str(tmp_path / "imgs"), str(tmp_path / "data"), 16, 3)
    assert "\n" not in str(error.value)
    assert not os.listdir(tmp_path / "data" / "folders")  # no half-written dataset


def test_skip_corrupt_images_warns_with_names_and_count(tmp_path, caplog):
    _with_corrupt(tmp_path / "imgs")
    with caplog.at_level(logging.WARNING, logger="wgan_jax"):
        source = folder.folder_source(str(tmp_path / "imgs"), str(tmp_path / "data"), 16, 3, True)
    assert len(source) == 8
    text = caplog.text
    assert "bad.png" in text and "truncated.png" in text and "skipped 2" in text


def test_unconvertible_pixels_are_an_error(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.fromarray(np.full((8, 8), 300, np.uint16)).save(tmp_path / "imgs" / "deep.png")
    with pytest.raises(DataError, match="deep.png"):
        folder.folder_source(str(tmp_path / "imgs"), str(tmp_path / "data"), 16, 3)
