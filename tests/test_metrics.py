"""Tests for wgan_jax.metrics: each metric against an independent implementation or known value."""

import itertools
import math

import numpy as np
import pytest

from wgan_jax import metrics
from wgan_jax.metrics.digits_classifier import (
    CACHE_NAME,
    DigitClassifier,
    area_matrix,
    load_digits_scaled,
    to_8x8,
    train_test_split_indices,
)
from wgan_jax.metrics.inception import InceptionExtractor, bilinear_matrix


# ---------------------------------------------------------------------------- FID
def _psd_sqrt(a):
    w, v = np.linalg.eigh(a)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def _fid_by_eigh(x, y):
    """Independent FID: Tr sqrtm(S1 S2) = sum sqrt eig(S1^1/2 S2 S1^1/2), all symmetric PSD."""
    mu1, mu2 = x.mean(0), y.mean(0)
    xc, yc = x - mu1, y - mu2
    s1 = xc.T @ xc / (len(x) - 1)
    s2 = yc.T @ yc / (len(y) - 1)
    r = _psd_sqrt(s1)
    eig = np.clip(np.linalg.eigvalsh(r @ s2 @ r), 0.0, None)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(eig).sum())


def test_fid_matches_eigendecomposition_formula():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 16))
    y = rng.standard_normal((400, 16)) @ rng.standard_normal((16, 16)) * 0.5 + 0.3
    expected = _fid_by_eigh(x, y)
    assert metrics.fid_from_features(x, y) == pytest.approx(expected, rel=1e-8)
    assert metrics.fid_from_features(x, x) == pytest.approx(0.0, abs=1e-8)


def test_fid_rank_deficient_covariance():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 64))  # rank 29 < 64
    y = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 64))  # rank 3
    expected = _fid_by_eigh(x, y)
    assert metrics.fid_from_features(x, y) == pytest.approx(expected, rel=1e-4)


def test_fid_from_stats_equals_features_and_accepts_scalars():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((200, 5)), rng.standard_normal((300, 5)) + 1.0
    mu1, s1 = metrics.feature_stats(x)
    mu2, s2 = metrics.feature_stats(y)
    assert metrics.fid_from_stats(mu1, s1, mu2, s2) == metrics.fid_from_features(x, y)
    # One-dimensional Gaussians: (m1 - m2)^2 + (sd1 - sd2)^2.
    assert metrics.fid_from_stats([0.0], [[4.0]], [3.0], [[1.0]]) == pytest.approx(9.0 + 1.0)


def test_fid_retries_with_eps_and_rejects_large_imaginary_part():
    # S1 S2 = [[0, 1], [0, 0]] is nilpotent: it has no square root (scipy's is not finite), so
    # FID retries with eps * I added to both: (1 + eps) [[eps, 1], [0, eps]], whose root has
    # the trace 2 sqrt(eps (1 + eps)). Without the retry the result would not be finite.
    nilpotent = np.array([[0.0, 1.0], [0.0, 0.0]])
    for eps in (1e-6, 1e-2):
        value = metrics.fid_from_stats(np.zeros(2), nilpotent, np.zeros(2), np.eye(2), eps=eps)
        assert value == pytest.approx(2.0 - 4.0 * np.sqrt(eps * (1.0 + eps)), rel=1e-9)
    # sqrtm(-I) = i I: an imaginary diagonal of 1 is an error, not a silent real part ...
    with pytest.raises(ValueError, match="imaginary"):
        metrics.fid_from_stats(np.zeros(2), -np.eye(2), np.zeros(2), np.eye(2))
    # ... while one under 1e-3 (round-off of a nearly singular covariance) is dropped:
    # sqrtm(diag(1, -1e-8)) = diag(1, 1e-4 i), so FID = Tr(S1) + Tr(S2) - 2 = 1 - 1e-8.
    almost = np.diag([1.0, -1e-8])
    value = metrics.fid_from_stats(np.zeros(2), almost, np.zeros(2), np.eye(2))
    assert value == pytest.approx(1.0 - 1e-8, rel=1e-12)


# ---------------------------------------------------------------------------- Inception batching
def test_extractor_pads_batches_and_repeats_gray_channels():
    seen = []

    def fake_network(variables, images):
        seen.append(images.shape)
        pool = images.reshape(len(images), -1)[:, :2048]
        return {"pool": pool, "logits": pool[:, :1008]}

    extractor = InceptionExtractor({}, batch_size=4, network=fake_network)
    gray = np.random.default_rng(0).uniform(-1, 1, (10, 32, 32, 1)).astype(np.float32)
    feats = extractor.features(gray)
    assert seen == [(4, 32, 32, 3)] * 3 and feats.shape == (10, 2048)
    np.testing.assert_array_equal(feats, np.repeat(gray, 3, axis=-1).reshape(10, -1)[:, :2048])


# ---------------------------------------------------------------------------- KID
def test_mmd2_unbiased_matches_loops():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))

    def k(a, b):
        return (a @ b / 3 + 1) ** 3

    m = 6
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(m)) / (m * m)
    assert metrics.mmd2_unbiased(x, y) == pytest.approx(xx + yy - 2 * xy, rel=1e-10)


def test_kid_unbiased_near_zero_for_one_distribution_and_positive_otherwise():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1000, 32)), rng.standard_normal((1000, 32))
    mean, std = metrics.kid_from_features(a, b, subsets=50, subset_size=100)
    assert abs(mean) < 3 * std / math.sqrt(50) + 1e-3
    shifted = rng.standard_normal((1000, 32)) * 1.3 + 0.2
    mean_d, std_d = metrics.kid_from_features(a, shifted, subsets=50, subset_size=100)
    assert mean_d > 10 * std_d / math.sqrt(50) and mean_d > 20 * abs(mean)


def test_kid_caps_subset_size_and_is_seeded():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 4)), rng.standard_normal((30, 4))
    first = metrics.kid_from_features(a, b, subsets=5)
    assert first == metrics.kid_from_features(a, b, subsets=5)
    assert np.isfinite(first).all()


# ---------------------------------------------------------------------------- IS
def test_inception_score_uniform_and_one_hot():
    uniform = np.full((100, 10), 0.1)
    assert metrics.inception_score(uniform) == pytest.approx((1.0, 0.0))
    one_hot = np.tile(np.eye(10), (10, 1))  # each split of 10 rows holds every class once
    mean, std = metrics.inception_score(one_hot, splits=10)
    assert mean == pytest.approx(10.0) and std == pytest.approx(0.0, abs=1e-12)
    assert metrics.inception_score(np.eye(10)[[3] * 50], splits=5)[0] == pytest.approx(1.0)


# ---------------------------------------------------------------------------- PR / DC
def _prdc_brute(real, fake, k_pr, k_dc):
    def dist(a, b):
        return np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1))

    rr, ff, rf = dist(real, real), dist(fake, fake), dist(real, fake)
    r_pr = np.sort(rr, axis=1)[:, k_pr]
    f_pr = np.sort(ff, axis=1)[:, k_pr]
    r_dc = np.sort(rr, axis=1)[:, k_dc]
    return {
        "precision": (rf <= r_pr[:, None]).any(0).mean(),
        "recall": (rf <= f_pr[None, :]).any(1).mean(),
        "density": (rf <= r_dc[:, None]).sum() / (k_dc * len(fake)),
        "coverage": (rf.min(1) <= r_dc).mean(),
    }


def test_prdc_matches_brute_force_with_tiny_chunks():
    rng = np.random.default_rng(0)
    real, fake = rng.standard_normal((60, 4)), rng.standard_normal((45, 4)) * 1.5 + 0.3
    want = _prdc_brute(real, fake, 3, 5)
    # 37 elements: one row per chunk; 1000: several rows per chunk, a short last chunk.
    for chunk_elements in (37, 1000):
        got = metrics.compute_prdc(real, fake, k_pr=3, k_dc=5, chunk_elements=chunk_elements)
        assert got == pytest.approx(want, abs=1e-12)
    assert metrics.precision_recall(real, fake, k=3) == pytest.approx(
        {k: want[k] for k in ("precision", "recall")}
    )
    assert metrics.density_coverage(real, fake, k=5) == pytest.approx(
        {k: want[k] for k in ("density", "coverage")}
    )


def test_prdc_identical_and_disjoint_sets():
    rng = np.random.default_rng(0)
    real = rng.standard_normal((300, 8))
    same = metrics.compute_prdc(real, real.copy())
    assert same["precision"] == same["recall"] == same["coverage"] == 1.0
    assert same["density"] >= 1.0
    far = metrics.compute_prdc(real, real + 100.0)
    assert far == {"precision": 0.0, "recall": 0.0, "density": 0.0, "coverage": 0.0}


@pytest.mark.slow
def test_prdc_two_10k_gaussian_samples():
    rng = np.random.default_rng(0)
    real, fake = rng.standard_normal((10_000, 64)), rng.standard_normal((10_000, 64))
    out = metrics.compute_prdc(real, fake, k_pr=3, k_dc=5)
    assert out["density"] == pytest.approx(1.0, abs=0.08)
    assert out["coverage"] > 0.95
    assert 0.5 < out["precision"] < 0.7 and 0.5 < out["recall"] < 0.7
    assert out["precision"] == pytest.approx(out["recall"], abs=0.03)


def test_compare_features_collects_every_metric():
    rng = np.random.default_rng(0)
    real, fake = rng.standard_normal((200, 6)), rng.standard_normal((150, 6)) + 0.5
    out = metrics.compare_features(real, fake, kid_subsets=5, kid_subset_size=100)
    assert out["fid"] == metrics.fid_from_features(real, fake)
    kid = metrics.kid_from_features(real, fake, subsets=5, subset_size=100)
    assert (out["kid_mean"], out["kid_std"]) == kid
    assert {k: out[k] for k in ("precision", "recall", "density", "coverage")} == (
        metrics.compute_prdc(real, fake)
    )


# ---------------------------------------------------------------------------- toy modes
@pytest.mark.parametrize("name", metrics.TOY_MIXTURES)
def test_toy_mixture_definitions(name):
    centres, std = metrics.toy_mixture(name)
    k = len(centres)
    assert k in (8, 25)
    assert len(np.unique(np.round(centres, 9), axis=0)) == k
    min_gap = min(np.linalg.norm(a - b) for a, b in itertools.combinations(centres, 2))
    assert min_gap > 20 * std  # modes are well separated at 3 std
    if name == "ring8":
        np.testing.assert_allclose(np.linalg.norm(centres, axis=1), 1.0)
        assert std == 0.01
    elif name == "8gaussians":
        np.testing.assert_allclose(np.linalg.norm(centres, axis=1), 2 / 1.414)
        assert std == pytest.approx(0.02 / 1.414)
    elif name == "grid25":
        assert set(np.unique(centres)) == {-4.0, -2.0, 0.0, 2.0, 4.0} and std == 0.05
    else:
        np.testing.assert_allclose(np.unique(centres), np.arange(-4, 5, 2) / 2.828)
        assert std == pytest.approx(0.05 / 2.828)


def test_toy_metrics_samples_at_modes_and_one_mode_missing():
    centres, std = metrics.toy_mixture("grid25")
    at_modes = np.repeat(centres, 4, axis=0)
    assert metrics.toy_mode_metrics(at_modes, centres, std) == {
        "modes": 25,
        "high_quality": 1.0,
        "reverse_kl": 0.0,
    }
    missing = np.repeat(centres[1:], 4, axis=0)
    out = metrics.toy_mode_metrics(missing, centres, std)
    assert out["modes"] == 24 and out["high_quality"] == 1.0
    assert out["reverse_kl"] == pytest.approx(math.log(25 / 24))


def test_toy_metrics_off_mode_samples_and_collapse():
    centres, std = metrics.toy_mixture("ring8")
    off = centres * (1 + 10 * std)  # 10 std out radially: nearest mode is right, quality is not
    samples = np.concatenate([centres[:2], off])
    out = metrics.toy_mode_metrics(samples, centres, std)
    assert out["modes"] == 2 and out["high_quality"] == pytest.approx(2 / 10)
    assert out["reverse_kl"] == pytest.approx(math.log(4))  # two of eight modes, equal mass
    nothing = metrics.toy_mode_metrics(off, centres, std)
    assert nothing == {"modes": 0, "high_quality": 0.0, "reverse_kl": pytest.approx(math.log(8))}
    one = metrics.toy_mode_metrics(np.repeat(centres[:1], 5, axis=0), centres, std)
    assert one["modes"] == 1 and one["reverse_kl"] == pytest.approx(math.log(8))


def test_toy_metrics_on_true_mixture_samples():
    rng = np.random.default_rng(0)
    centres, std = metrics.toy_mixture("8gaussians")
    samples = centres[rng.integers(0, 8, 2500)] + std * rng.standard_normal((2500, 2))
    out = metrics.toy_mode_metrics(samples, centres, std)
    assert out["modes"] == 8 and out["reverse_kl"] < 0.01
    assert out["high_quality"] == pytest.approx(1 - math.exp(-4.5), abs=0.01)  # chi2_2 <= 9


# ---------------------------------------------------------------------------- exact W1
@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_wasserstein1_exact_matches_permutation_brute_force(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    best = min(cost[np.arange(n), list(p)].mean() for p in itertools.permutations(range(n)))
    assert metrics.wasserstein1_exact(x, y) == pytest.approx(best, rel=1e-12)


def test_wasserstein1_exact_shift_and_errors():
    x = np.random.default_rng(0).standard_normal((50, 2))
    assert metrics.wasserstein1_exact(x, x[::-1]) == pytest.approx(0.0, abs=1e-12)
    assert metrics.wasserstein1_exact(x, x + [3.0, 4.0]) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="equal sample sizes"):
        metrics.wasserstein1_exact(x, x[:10])


# ---------------------------------------------------------------------------- stacked digits
def test_stacked_mode_metrics():
    all_modes = np.array(list(itertools.product(range(10), repeat=3)))
    assert metrics.stacked_mode_metrics(all_modes) == {
        "modes": 1000,
        "num_modes": 1000,
        "kl": pytest.approx(0.0, abs=1e-12),
    }
    collapsed = metrics.stacked_mode_metrics(np.zeros((100, 3), dtype=int))
    assert collapsed["modes"] == 1 and collapsed["kl"] == pytest.approx(math.log(1000))
    probs = np.eye(10)[all_modes[:500]]  # [500, 3, 10]
    half = metrics.stacked_mode_metrics(probs)
    assert half["modes"] == 500 and half["kl"] == pytest.approx(math.log(2))


# ---------------------------------------------------------------------------- digit classifier
def test_area_matrix_averages_blocks_and_fractional_spans():
    np.testing.assert_allclose(area_matrix(16, 8), np.kron(np.eye(8), [[0.5, 0.5]]))
    m = area_matrix(12, 8)
    np.testing.assert_allclose(m.sum(1), 1.0)
    np.testing.assert_allclose(m[0, :2], [2 / 3, 1 / 3])
    images, _ = load_digits_scaled()
    big = np.repeat(np.repeat(images[:5], 4, axis=1), 4, axis=2)
    np.testing.assert_allclose(to_8x8(big), images[:5].reshape(5, 64))


@pytest.fixture(scope="module")
def digit_classifier(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    model = DigitClassifier.load_or_train(data_dir)
    return model, data_dir


def test_digit_classifier_accuracy_and_cache(digit_classifier):
    model, data_dir = digit_classifier
    assert model.test_accuracy >= 0.95
    assert (data_dir / CACHE_NAME).exists()
    again = DigitClassifier.load_or_train(data_dir)
    np.testing.assert_array_equal(again.w1, model.w1)
    assert again.test_accuracy == model.test_accuracy
    images, labels = load_digits_scaled()
    _, test_idx = train_test_split_indices(len(labels))
    up = np.repeat(np.repeat(images[test_idx], 4, axis=1), 4, axis=2)  # 32x32
    assert (model.predict(up) == labels[test_idx]).mean() >= 0.95


def test_digit_classifier_on_bilinear_upscaled_uint8_digits(digit_classifier):
    """Images as a data pipeline makes them: bilinear x4 upscale, uint8 quantised, to [-1, 1]."""
    model, _ = digit_classifier
    images, labels = load_digits_scaled()
    _, test_idx = train_test_split_indices(len(labels))
    m = bilinear_matrix(8, 32)
    up = np.einsum("ih,nhwc,jw->nijc", m, images[test_idx], m)
    up = np.rint((up + 1.0) * 127.5) / 127.5 - 1.0
    assert (model.predict(up) == labels[test_idx]).mean() >= 0.95


def test_digit_classifier_outputs_and_stacked_channels(digit_classifier):
    model, _ = digit_classifier
    images, labels = load_digits_scaled()
    probs = model.predict_proba(images[:20])
    assert probs.shape == (20, 10)
    np.testing.assert_allclose(probs.sum(1), 1.0)
    assert model.features(images[:20]).shape == (20, 64)
    stacked = np.concatenate([images[:30], images[30:60], images[60:90]], axis=-1)
    per_channel = model.predict_channels(stacked)
    assert per_channel.shape == (30, 3)
    np.testing.assert_array_equal(per_channel[:, 1], model.predict(images[30:60]))
