"""Precision/recall (Kynkaanniemi et al. 2019) and density/coverage (Naeem et al. 2020).

All pairwise distances are computed in float64 row chunks, so 10k x 10k sets need only a
bounded amount of memory (about ``chunk_elements`` doubles per chunk, `CHUNK_ELEMENTS` = 32 MiB
by default). Ball membership uses ``<=`` throughout (a point on a ball's boundary is inside);
for continuous data this matches the reference implementations, which differ only on that
measure-zero boundary. ``compute_prdc``
computes all four numbers with one real-real, one fake-fake and one real-fake pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["compute_prdc", "precision_recall", "density_coverage"]

CHUNK_ELEMENTS = 1 << 22


def _as_features(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must have shape [N>0, D], got {x.shape}")
    return x


def _sq_distance_chunks(
    a: np.ndarray, b: np.ndarray, chunk_elements: int
) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (row slice of ``a``, squared Euclidean distances of those rows to all of ``b``),
    about `chunk_elements` distances (at least one row) at a time."""
    b_sq = np.einsum("ij,ij->i", b, b)
    rows = max(1, chunk_elements // max(1, b.shape[0]))
    for start in range(0, a.shape[0], rows):
        block = a[start : start + rows]
        d2 = np.einsum("ij,ij->i", block, block)[:, None] + b_sq[None, :] - 2.0 * block @ b.T
        np.maximum(d2, 0.0, out=d2)
        yield slice(start, start + block.shape[0]), d2


def kth_neighbour_sq_radii(
    x: np.ndarray, ks: Sequence[int], chunk_elements: int = CHUNK_ELEMENTS
) -> dict[int, np.ndarray]:
    """Squared distance from each row of ``x`` to its k-th nearest other row, for each k
    (`chunk_elements`: distances held at a time)."""
    x = _as_features(x, "x")
    ks = sorted(set(ks))
    if ks[0] < 1 or ks[-1] >= x.shape[0]:
        raise ValueError(f"k must be in [1, N-1={x.shape[0] - 1}], got {ks}")
    radii = {k: np.empty(x.shape[0]) for k in ks}
    for rows, d2 in _sq_distance_chunks(x, x, chunk_elements):
        d2[np.arange(d2.shape[0]), np.arange(rows.start, rows.stop)] = 0.0
        # Index k of the sorted row skips the point itself (distance 0 at index 0).
        part = np.partition(d2, ks, axis=1)
        for k in ks:
            radii[k][rows] = part[:, k]
    return radii


def compute_prdc(
    real: np.ndarray,
    fake: np.ndarray,
    k_pr: int | None = 3,
    k_dc: int | None = 5,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> dict[str, float]:
    """Precision and recall with ``k_pr``-NN balls, density and coverage with ``k_dc``-NN balls.

    precision = fraction of fakes inside some real ball; recall = fraction of reals inside some
    fake ball (a ball's radius is its centre's distance to the k-th nearest point of its own set).
    density = (1 / (k M)) * sum over the M fakes of the number of real balls containing it;
    coverage = fraction of real points whose nearest fake lies inside their ball.
    Pass ``None`` for ``k_pr`` or ``k_dc`` to skip that pair. ``chunk_elements`` bounds the
    distances held at a time (memory only: every chunk size gives the same numbers).
    """
    real = _as_features(real, "real")
    fake = _as_features(fake, "fake")
    if real.shape[1] != fake.shape[1]:
        raise ValueError(f"feature sizes differ: {real.shape[1]} vs {fake.shape[1]}")
    ks = [k for k in (k_pr, k_dc) if k is not None]
    if not ks:
        return {}
    real_r2 = kth_neighbour_sq_radii(real, ks, chunk_elements)
    fake_r2 = (
        kth_neighbour_sq_radii(fake, [k_pr], chunk_elements)[k_pr] if k_pr is not None else None
    )
    fake_in_real_ball = np.zeros(fake.shape[0], dtype=bool)
    real_in_fake_ball = np.zeros(real.shape[0], dtype=bool)
    covered = np.zeros(real.shape[0], dtype=bool)
    ball_counts = 0
    for rows, d2 in _sq_distance_chunks(real, fake, chunk_elements):
        if k_pr is not None:
            assert fake_r2 is not None  # with k_pr
            fake_in_real_ball |= (d2 <= real_r2[k_pr][rows][:, None]).any(axis=0)
            real_in_fake_ball[rows] = (d2 <= fake_r2[None, :]).any(axis=1)
        if k_dc is not None:
            radii = real_r2[k_dc][rows]
            ball_counts += int((d2 <= radii[:, None]).sum())
            covered[rows] = d2.min(axis=1) <= radii
    out = {}
    if k_pr is not None:
        out["precision"] = float(fake_in_real_ball.mean())
        out["recall"] = float(real_in_fake_ball.mean())
    if k_dc is not None:
        out["density"] = ball_counts / (k_dc * fake.shape[0])
        out["coverage"] = float(covered.mean())
    return out


def precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> dict[str, float]:
    """Improved precision and recall; returns ``{"precision", "recall"}`` (see ``compute_prdc``)."""
    return compute_prdc(real, fake, k_pr=k, k_dc=None)


def density_coverage(real: np.ndarray, fake: np.ndarray, k: int = 5) -> dict[str, float]:
    """Density and coverage; returns ``{"density", "coverage"}`` (see ``compute_prdc``)."""
    return compute_prdc(real, fake, k_pr=None, k_dc=k)
