"""Pictures of a run: image grids, scatter plots of 2-D samples and plots of logged metrics.

Everything is rendered in memory and written atomically as PNG (local path or URL, see
`wgan_jax.fs`). Plots are drawn with matplotlib's object API on an Agg canvas (no pyplot), so they
neither need a display nor touch the user's global matplotlib state. Which files a run holds, and
where, is `wgan_jax.records`' business; this module only draws.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import numpy as np

from wgan_jax import fs

__all__ = ["save_image_grid", "save_scatter", "plot_metrics", "make_grid", "grid_rgb"]


def _to_uint8(images: np.ndarray) -> np.ndarray:
    """[-1, 1] floats -> uint8 in [0, 255]; NaN becomes 0."""
    images = np.nan_to_num(np.asarray(images, dtype=np.float32), nan=-1.0)
    return np.round((np.clip(images, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)


def make_grid(images: np.ndarray, ncols: int | None = None, pad: int = 2) -> np.ndarray:
    """Tiles [N, H, W, C] images in [-1, 1] into one uint8 [rows*(H+pad)+pad, ..., C] array.

    Padding is black (and transparent for RGBA). `ncols` defaults to ceil(sqrt(N)).
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise ValueError(f"images must be [N, H, W, C] with C in 1, 3, 4; got {images.shape}")
    n, h, w, c = images.shape
    if n == 0:
        raise ValueError("no images to tile")
    ncols = max(1, min(ncols or math.ceil(math.sqrt(n)), n))
    nrows = math.ceil(n / ncols)
    grid = np.zeros((nrows * (h + pad) + pad, ncols * (w + pad) + pad, c), np.uint8)
    pixels = _to_uint8(images)
    for i in range(n):
        r, col = divmod(i, ncols)
        y, x = pad + r * (h + pad), pad + col * (w + pad)
        grid[y : y + h, x : x + w] = pixels[i]
    return grid


def _over_checkerboard(rgba: np.ndarray, square: int = 4) -> np.ndarray:
    """Composites an RGBA uint8 image over a grey checkerboard, giving RGB uint8."""
    h, w = rgba.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    board = np.where(((yy // square) + (xx // square)) % 2 == 0, 200, 150).astype(np.float32)
    alpha = rgba[..., 3:4].astype(np.float32) / 255.0
    rgb = rgba[..., :3].astype(np.float32) * alpha + board[..., None] * (1.0 - alpha)
    return np.round(rgb).astype(np.uint8)


def grid_rgb(images: np.ndarray, ncols: int | None = None) -> np.ndarray:
    """A [H, W, 3] uint8 grid for viewers without alpha/grayscale handling (TensorBoard)."""
    grid = make_grid(images, ncols)
    if grid.shape[-1] == 1:
        return np.repeat(grid, 3, axis=-1)
    if grid.shape[-1] == 4:
        return _over_checkerboard(grid)
    return grid


def save_image_grid(
    path: str, images: np.ndarray, ncols: int | None = None, min_tile: int = 32
) -> None:
    """Saves [N, H, W, C] images in [-1, 1] as one PNG grid.

    Images smaller than `min_tile` px are enlarged by an integer factor (nearest neighbour, so
    every pixel stays a visible square) so that 8 px digits are not specks. Grayscale is saved
    as mode L, RGB as RGB and RGBA keeps its alpha channel (viewers show it over their own
    background). The file is written atomically.
    """
    from PIL import Image

    images = np.asarray(images)
    factor = max(1, math.ceil(min_tile / images.shape[1])) if images.ndim >= 3 else 1
    if factor > 1:
        images = images.repeat(factor, axis=1).repeat(factor, axis=2)
    grid = make_grid(images, ncols)
    if grid.shape[-1] == 1:
        image = Image.fromarray(grid[..., 0], mode="L")
    else:
        image = Image.fromarray(grid, mode="RGBA" if grid.shape[-1] == 4 else "RGB")
    _save_atomic(path, lambda f: image.save(f, format="PNG"))


def _save_atomic(path: str, save: Callable[[IO[bytes]], Any]) -> None:
    """Renders a file in memory with `save(buffer)`, then writes it atomically (local or URL)."""
    buffer = io.BytesIO()
    save(buffer)
    fs.write_atomic(path, buffer.getvalue())


def _new_figure(width: float = 6.0, height: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save_figure(path: str, figure) -> None:
    _save_atomic(path, lambda f: figure.savefig(f, format="png"))


def save_scatter(
    path: str,
    samples: np.ndarray,
    reference: np.ndarray | None = None,
    title: str = "",
) -> None:
    """Scatter plot of generated 2-D points (orange) over real points (blue), saved as PNG."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1, 2)
    figure = _new_figure(5.0, 5.0)
    ax = figure.add_subplot(1, 1, 1)
    figure.subplots_adjust(left=0.1, right=0.97, bottom=0.07, top=0.93)
    if reference is not None:
        reference = np.asarray(reference, dtype=np.float32).reshape(-1, 2)
        ax.scatter(reference[:, 0], reference[:, 1], s=2, alpha=0.4, c="tab:blue", label="real")
    finite = samples[np.all(np.isfinite(samples), axis=1)]
    ax.scatter(finite[:, 0], finite[:, 1], s=2, alpha=0.6, c="tab:orange", label="generated")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="upper right", markerscale=4)
    if title:
        ax.set_title(title)
    _save_figure(path, figure)


def _columns(rows: Sequence[Mapping]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """key -> (steps, values) over the rows where the key holds a number (null/NaN skipped)."""
    columns: dict[str, tuple[list, list]] = {}
    for row in rows:
        step = row.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                steps, values = columns.setdefault(key, ([], []))
                steps.append(step)
                values.append(value)
    return {k: (np.asarray(s, np.float64), np.asarray(v, np.float64))
            for k, (s, v) in columns.items()}


_EMPTY = (np.zeros(0), np.zeros(0))


def _thin(steps: np.ndarray, values: np.ndarray, limit: int = 2000):
    """At most about `limit` evenly strided points (always keeping the last) for fast drawing."""
    if steps.size <= limit:
        return steps, values
    index = np.unique(np.append(np.arange(0, steps.size, steps.size // limit + 1), steps.size - 1))
    return steps[index], values[index]


def _plot_lines(path: str, columns: Mapping, keys: Sequence[str], title: str,
                log: bool = False, hline: float | None = None) -> bool:
    """One axis with a line per key that has data; returns False (no file) if none has."""
    figure = _new_figure()
    ax = figure.add_subplot(1, 1, 1)
    figure.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.92)
    drawn = False
    for key in keys:
        steps, values = _thin(*columns.get(key, _EMPTY))
        if log:
            keep = values > 0
            steps, values = steps[keep], values[keep]
        if steps.size:
            ax.plot(steps, values, label=key, linewidth=1, marker="." if steps.size < 30 else None)
            drawn = True
    if not drawn:
        return False
    if hline is not None:
        ax.axhline(hline, color="grey", linestyle="--", linewidth=0.8)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save_figure(path, figure)
    return True


def _plot_panels(path: str, columns: Mapping, keys: Sequence[str], title: str) -> bool:
    """One small panel per key (metrics on different scales, such as eval/*)."""
    keys = [k for k in keys if columns.get(k, _EMPTY)[0].size]
    if not keys:
        return False
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    figure = _new_figure(4.0 * ncols, 3.0 * nrows)
    figure.subplots_adjust(left=0.08, right=0.97, bottom=0.1, top=0.85, hspace=0.5, wspace=0.3)
    for i, key in enumerate(keys):
        ax = figure.add_subplot(nrows, ncols, i + 1)
        steps, values = _thin(*columns[key])
        ax.plot(steps, values, marker=".", linewidth=1)
        ax.set_title(key, fontsize="small")
        ax.grid(alpha=0.3)
    figure.suptitle(title)
    _save_figure(path, figure)
    return True


def plot_metrics(rows: Sequence[Mapping], out_dir: str) -> list[str]:
    """Draws the metric plots of `rows` (metrics.jsonl's objects) into OUT_DIR; returns the paths.

    Plots: losses, Wasserstein estimate, gradient penalty and the critic's input-gradient norms,
    parameter gradient norms (log scale, per layer when logged), unit health (dead/saturated
    fractions, diversity) and one panel per `eval/*` metric. A plot whose metrics were never
    logged is skipped. Series are thinned to ~2,000 points; about a second of CPU for 10k rows.
    """
    if not rows:
        return []
    fs.makedirs(out_dir)
    columns = _columns(rows)
    keys = sorted(columns)
    written = []

    def out(name: str) -> str:
        return fs.join(out_dir, name)

    plans = [
        ("losses.png", ["critic_loss", "generator_loss"], "losses", False, None),
        ("wasserstein.png", ["wasserstein_estimate"], "Wasserstein estimate", False, None),
        ("gradient_penalty.png", ["gradient_penalty"], "gradient penalty", False, None),
        (
            "input_grad_norms.png",
            [k for k in keys if k.startswith("input_grad_norm/")],
            "critic input-gradient norms",
            False,
            1.0,
        ),
        ("grad_norms.png", ["grad_norm/critic", "grad_norm/generator"], "gradient norms",
         True, None),
        (
            "layer_grad_norms.png",
            [k for k in keys if k.startswith("grad_norm/") and k.count("/") >= 2],
            "per-layer gradient norms",
            True,
            None,
        ),
        (
            "units.png",
            [k for k in keys if k.startswith(("dead_units/", "saturated/"))] + ["diversity"],
            "dead / saturated fractions, diversity",
            False,
            None,
        ),
    ]
    for name, plan_keys, title, log, hline in plans:
        if plan_keys and _plot_lines(out(name), columns, plan_keys, title, log=log, hline=hline):
            written.append(out(name))
    eval_keys = [k for k in keys if k.startswith("eval/")]
    if eval_keys and _plot_panels(out("eval.png"), columns, eval_keys, "evaluation"):
        written.append(out("eval.png"))
    return written
