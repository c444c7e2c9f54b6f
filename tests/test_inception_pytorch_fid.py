"""The Flax FID Inception against pytorch-fid's own InceptionV3, without torch at test time.

tests/fixtures/inception_pytorch_fid.npz holds pytorch-fid's pool3 features of three small images
on random weights (made by tests/fixtures/make_inception_fixture.py, which needs torch and
pytorch-fid); the same weights are drawn again here from the names and shapes of pytorch-fid's
state dict and go through `convert_pytorch_fid_weights`, so a wrong renaming, transposition,
block, pooling, padding rule or resize in the port changes the features.
"""

import importlib.util
import os

import numpy as np
import pytest

from wgan_jax.metrics import inception

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _maker():
    path = os.path.join(FIXTURES, "make_inception_fixture.py")
    spec = importlib.util.spec_from_file_location("make_inception_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fixture():
    with np.load(os.path.join(FIXTURES, "inception_pytorch_fid.npz")) as f:
        return {k: f[k] for k in f.files}


def test_fixture_is_pytorch_fids_state_dict(fixture):
    names = list(fixture["names"])
    assert len(names) == len(set(names)) and "fc.weight" in names
    assert not any(n.startswith("AuxLogits") for n in names)  # the FID network has no aux head
    assert fixture["pool"].shape == (3, inception.FEATURE_DIM)


@pytest.mark.slow
def test_flax_port_matches_pytorch_fid_features(fixture):
    shapes = [tuple(int(s) for s in row if s >= 0) for row in fixture["shapes"]]
    weights = _maker().random_weights(list(fixture["names"]), shapes, int(fixture["seed"]))
    extractor = inception.InceptionExtractor.from_pytorch_fid_weights(weights, batch_size=3)
    # pytorch-fid's normalize_input maps [0, 1] to [-1, 1] as 2 x - 1, in float32.
    images = fixture["images"].astype(np.float32) / np.float32(255.0)
    pool = extractor.features(np.float32(2.0) * images - np.float32(1.0))
    ref = fixture["pool"]
    np.testing.assert_allclose(pool, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # The features differ between the images far beyond that tolerance, so they are compared
    # where the images matter, not only in their common offset.
    spread = ref - ref.mean(0)
    assert np.abs(spread).max() > 100 * 1e-4 * np.abs(ref).max()
    np.testing.assert_allclose(pool - pool.mean(0), spread, atol=1e-3 * np.abs(spread).max())
