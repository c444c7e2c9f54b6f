"""Labels of conditional runs from `stacked_digits` and `folder:/path` (`folder_classes`): the
classes each example gets, the number of classes read from the data, the refusals, and a
2-iteration conditional run through the real trainer (the tfds source: tests/test_data_tfds.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from wgan_jax.config import apply_overrides, get_config_schema, validate_config
from wgan_jax.data.digits import digits_images, stacked_digits_classes, stacked_digits_labels
from wgan_jax.data.sources import num_classes
from wgan_jax.data.spec import DataSpec
from wgan_jax.errors import ConfigError
from wgan_jax.input_pipeline import create_input_pipeline
from wgan_jax.step import make_mesh

TINY = {"model.kind": "mlp", "model.width": 8, "model.depth": 1, "model.z_dim": 4,
        "image_size": 8, "global_batch_size": 8, "n_critic": 1,
        "model.conditional": "projection"}


def _config(overrides: dict):
    c = get_config_schema()
    apply_overrides(c, {**TINY, **overrides})
    validate_config(c, 1)
    return c


def train_two_iterations(overrides: dict, workdir: str) -> tuple[int, tuple[int, ...]]:
    """Trains a tiny conditional MLP for 2 iterations with the real trainer; returns the
    restored run's number of classes and the shape of its critic's class embedding."""
    from wgan_jax import runs
    from wgan_jax.train import train_and_evaluate

    c = _config({**overrides, "num_iterations": 2, "sample_every": 0, "plot_every": 0,
                 "checkpoint_every": 0, "log_every": 1, "diagnostics.level": "off"})
    summary = train_and_evaluate(c, workdir)
    assert summary["step"] == 2 and np.isfinite(summary["metrics"]["critic_loss"])
    _, gan, state, _ = runs.load_run(workdir)
    return gan.num_classes, state.d_params["class_embed"]["embedding"].shape


def test_stacked_class_is_100r_plus_10g_plus_b():
    triples = np.array([[1, 2, 3], [0, 0, 7], [9, 9, 9], [0, 0, 0]])
    np.testing.assert_array_equal(stacked_digits_classes(triples), [123, 7, 999, 0])
    np.testing.assert_array_equal(stacked_digits_classes(triples.reshape(2, 2, 3)),
                                  [[123, 7], [999, 0]])


def test_stacked_digits_batches_carry_each_images_class():
    c = _config({"dataset": "stacked_digits", "num_channels": 3, "dataset_size": 400})
    assert num_classes(DataSpec.from_config(c)) == 1000
    it = create_input_pipeline(DataSpec.from_config(c), make_mesh())
    images, labels = next(it)
    counts = np.bincount(stacked_digits_classes(stacked_digits_labels()), minlength=1000)
    assert len(it.class_frequencies) == 1000 and sum(it.class_frequencies) == pytest.approx(1.0)
    assert np.count_nonzero(it.class_frequencies) <= 400 < np.count_nonzero(counts)  # the subset's
    grey, digit = digits_images(8)
    pixels = np.rint((np.asarray(images)[0] + 1.0) * 127.5).astype(np.uint8)
    for image, label in zip(pixels, np.asarray(labels)[0], strict=True):
        assert it.class_frequencies[label] > 0
        for channel, place in enumerate((100, 10, 1)):
            matches = np.flatnonzero(np.all(grey == image[..., channel], axis=(1, 2)))
            assert (label // place) % 10 in digit[matches], (label, channel)


# ------------------------------------------------------------------------ folder_classes
CLASSES = {"cat": 3, "ant": 2, "bee": 1}  # sorted: ant 0, bee 1, cat 2


def _colour(name: str, i: int) -> tuple[int, int, int]:
    return (40 * sorted(CLASSES).index(name) + 10, 30 * i + 5, 200)


def _write(folder, classes: dict[str, int]) -> str:
    for name, count in classes.items():
        (folder / name).mkdir(parents=True)
        for i in range(count):
            Image.new("RGB", (8, 8), _colour(name, i)).save(folder / name / f"{i}.png")
    return str(folder)


@pytest.fixture
def classes_folder(tmp_path) -> str:
    return _write(tmp_path / "pictures", CLASSES)


def _folder(path: str, tmp_path, **overrides):
    return _config({"dataset": f"folder:{path}", "folder_classes": True, "num_channels": 3,
                    "data_dir": str(tmp_path / "data"), **overrides})


def test_folder_subfolders_are_the_classes_in_sorted_order(classes_folder, tmp_path):
    c = _folder(classes_folder, tmp_path)
    assert num_classes(DataSpec.from_config(c)) == 3
    it = create_input_pipeline(DataSpec.from_config(c), make_mesh())
    np.testing.assert_allclose(it.class_frequencies, [2 / 6, 1 / 6, 3 / 6])
    images, labels = next(it)
    red = np.rint((np.asarray(images)[0, :, 0, 0, 0] + 1.0) * 127.5)
    np.testing.assert_array_equal((red - 10) / 40, np.asarray(labels)[0])
    assert len(set(np.asarray(labels)[0].tolist())) == 3


@pytest.mark.parametrize("layout, words", [
    ({"": 2, "a": 1, "b": 1}, ["directly in it", "0.png"]),
    ({"only": 3}, ["1 class subfolder"]),
    ({"a": 2, "b": 0}, ["'b' has no PNG or JPEG images"]),
])
def test_folder_classes_refusals_name_the_key_and_folder(layout, words, tmp_path):
    root = tmp_path / "pictures"
    for name, count in layout.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.new("RGB", (8, 8), (i, i, i)).save(root / name / f"{i}.png")
    c = _folder(str(root), tmp_path, **{"model.conditional": "none"})
    for build in (lambda: num_classes(DataSpec.from_config(_folder(str(root), tmp_path))),
                  lambda: create_input_pipeline(DataSpec.from_config(c), make_mesh())):
        with pytest.raises(ConfigError) as error:
            build()
        message = str(error.value)
        assert message.startswith("config.folder_classes: folder:") and str(root) in message
        assert "\n" not in message
        for word in words:
            assert word in message, message
    assert not (tmp_path / "data").exists()  # refused before the conversion wrote anything


@pytest.mark.parametrize("overrides, key", [
    ({"dataset": "digits", "folder_classes": True}, "folder_classes"),
    ({"dataset": "digits", "data_label": "digit"}, "data_label"),
    ({"dataset": "tfds:mnist", "data_label": " "}, "data_label"),
])
def test_label_keys_on_the_wrong_dataset_are_refused(overrides, key):
    with pytest.raises(ConfigError, match=f"^config.{key}: "):
        _config(overrides)


@pytest.mark.slow
def test_conditional_runs_on_stacked_digits_and_folders(classes_folder, tmp_path):
    assert train_two_iterations({"dataset": "stacked_digits", "num_channels": 3},
                                str(tmp_path / "stacked")) == (1000, (1000, 8))
    assert train_two_iterations(
        {"dataset": f"folder:{classes_folder}", "folder_classes": True, "num_channels": 3,
         "data_dir": str(tmp_path / "data")}, str(tmp_path / "folder")) == (3, (3, 8))
    # The run recorded its class count: it is restored and sampled after its data is gone.
    import shutil

    from wgan_jax import runs

    shutil.rmtree(classes_folder)
    config, gan, state, _ = runs.load_run(str(tmp_path / "folder"))
    assert config.model.num_classes == gan.num_classes == 3
    images = runs.generate_class_samples(gan, state, 2, seed=0, labels=[2, 0])
    assert images.shape == (4, 8, 8, 3) and np.isfinite(images).all()


def test_a_class_count_that_is_not_the_datas_is_refused(classes_folder, tmp_path):
    from wgan_jax.data.sources import check_num_classes

    c = _folder(classes_folder, tmp_path, **{"model.num_classes": 3})
    check_num_classes(DataSpec.from_config(c))
    c.model.num_classes = 4
    with pytest.raises(ConfigError, match=r"^config.model.num_classes: 4, but folder:.* has 3 "):
        check_num_classes(DataSpec.from_config(c))
    with pytest.raises(ConfigError, match=r"^config.model.num_classes: 2: only a conditional"):
        _config({"model.conditional": "none", "model.num_classes": 2})
