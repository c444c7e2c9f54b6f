"""2-D toy distributions, exactly as the WGAN-GP reference code and the mode-collapse papers
define them (see REFERENCES.md).

Every batch is a pure function of `(seed, index)`, so an iterator's position is one integer
and every process can build the same global batch and keep its own rows.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["toy_batch", "toy_samples", "MIXTURES"]

SQRT2 = 1.414  # the reference code divides by these rounded constants
TWO_SQRT2 = 2.828


def _rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, index])


def eight_gaussians_centres() -> np.ndarray:
    """The 8 centres in data space (after the reference's scale 2 and division by 1.414)."""
    s = 1.0 / np.sqrt(2.0)
    unit = np.array([(1, 0), (-1, 0), (0, 1), (0, -1), (s, s), (s, -s), (-s, s), (-s, -s)])
    return unit * 2.0 / SQRT2


def twenty_five_gaussians_centres() -> np.ndarray:
    grid = np.array([(2.0 * x, 2.0 * y) for x in range(-2, 3) for y in range(-2, 3)])
    return grid / TWO_SQRT2


def ring8_centres() -> np.ndarray:
    angles = 2.0 * np.pi * np.arange(8) / 8.0  # not linspace(0, 2pi, 8): that repeats a mode
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def grid25_centres() -> np.ndarray:
    return np.array([(x, y) for x in (-4, -2, 0, 2, 4) for y in (-4, -2, 0, 2, 4)], np.float64)


#: name -> (centres, per-coordinate std in data space); swissroll has no modes.
MIXTURES = {
    "8gaussians": (eight_gaussians_centres, 0.02 / SQRT2),
    "25gaussians": (twenty_five_gaussians_centres, 0.05 / TWO_SQRT2),
    "ring8": (ring8_centres, 0.01),
    "grid25": (grid25_centres, 0.05),
}


@functools.lru_cache(maxsize=4)
def twenty_five_gaussians_dataset(seed: int) -> np.ndarray:
    """The reference's fixed set: 4,000 points per mode (100,000), shuffled, / 2.828."""
    rng = np.random.default_rng([seed, 25])
    centres = np.array([(2.0 * x, 2.0 * y) for x in range(-2, 3) for y in range(-2, 3)])
    points = np.repeat(centres, 4000, axis=0) + rng.normal(0.0, 0.05, (100_000, 2))
    rng.shuffle(points)
    return (points / TWO_SQRT2).astype(np.float32)


def _mixture(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    centres_fn, std = MIXTURES[name]
    centres = centres_fn()
    which = rng.integers(0, len(centres), n)
    return (centres[which] + rng.normal(0.0, std, (n, 2))).astype(np.float32)


def toy_batch(name: str, batch_size: int, seed: int, index: int) -> np.ndarray:
    """Global batch number `index` of toy dataset `name`: float32 [batch_size, 2]."""
    if name == "25gaussians":
        data = twenty_five_gaussians_dataset(seed)
        per_epoch = len(data) // batch_size
        start = (index % per_epoch) * batch_size
        return data[start : start + batch_size]
    rng = _rng(seed, index)
    if name == "swissroll":
        from sklearn.datasets import make_swiss_roll

        state = rng.integers(2**31)
        points, _ = make_swiss_roll(n_samples=batch_size, noise=0.25, random_state=state)
        return (points[:, [0, 2]] / 7.5).astype(np.float32)
    if name in MIXTURES:
        return _mixture(name, batch_size, rng)
    raise KeyError(name)


def toy_samples(name: str, n: int, seed: int) -> np.ndarray:
    """n independent real samples (for plots and evaluation)."""
    if name == "25gaussians":
        return _mixture(name, n, _rng(seed, 10**9))
    return toy_batch(name, n, seed, 10**9)
