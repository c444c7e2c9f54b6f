"""Process-0 side effects of training: JSONL metric/event logs, TensorBoard, PNG images and plots.

Files written under WORKDIR:

* `metrics.jsonl`: one JSON object per call of `write_scalars`, `{"step": N, "name": value, ...}`.
  Values are plain JSON numbers; a non-finite value (NaN, +-inf) is written as `null`, so every
  line is strict JSON that any reader accepts (TensorBoard still receives the raw value).
* `events.jsonl`: one JSON object per health/guard event (`write_event`).
* `events.out.tfevents.*`: TensorBoard scalars, histograms and images, through tensorboardX
  (which does not import TensorFlow).
* `plots/*.png`: `update_plots` redraws these from `metrics.jsonl`.

WORKDIR may be a URL such as `gs://bucket/run` (see `wgan_jax.fs`): images are rendered in
memory and uploaded whole, the JSONL logs are rewritten whole on each flush, and TensorBoard is
off (metrics.jsonl holds every scalar).

Plots are drawn with matplotlib's object API on an Agg canvas (no pyplot), so they neither need a
display nor touch the user's global matplotlib state.
"""

from __future__ import annotations

import io
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import numpy as np

from wgan_jax import fs

log = logging.getLogger("wgan_jax")

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
PLOTS_DIR = "plots"


def json_safe(value: Any) -> Any:
    """A strict-JSON version of a value: numpy numbers as int/float, non-finite floats as None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (int, np.integer)):
        return int(value)
    array = np.asarray(value)
    if array.ndim == 0 and array.dtype.kind in "biuf":
        number = array.item()
        if isinstance(number, float) and not math.isfinite(number):
            return None
        return number
    if array.dtype.kind in "biuf":
        return json_safe(array.tolist())
    return str(value)


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(json_safe(dict(obj)), allow_nan=False, separators=(",", ":"))


def _json_lines(text: str) -> list[tuple[str, dict]]:
    """(stripped line, object) for each line of `text` that holds a JSON object."""
    rows = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append((line, row))
    return rows


def read_jsonl(path: str) -> list[dict]:
    """Reads a JSON-lines file (local path or URL) into dicts.

    Lines that are not a JSON object (typically the last line of a file whose writer was killed
    mid-write) are skipped. Raises `FileNotFoundError` if the file does not exist.
    """
    return [row for _, row in _json_lines(fs.read_text(path))]


def _lines_up_to(text: str, max_step: int) -> str:
    """The JSON-object lines of `text` with `step <= max_step` (or no step), one per line."""
    kept = []
    for line, row in _json_lines(text):
        step = row.get("step")
        if isinstance(step, (int, float)) and step > max_step:
            continue
        kept.append(line + "\n")
    return "".join(kept)


def _truncate_jsonl(path: str, max_step: int) -> None:
    """Keeps only the lines with `step <= max_step` (and step-less lines); drops broken lines."""
    try:
        text = fs.read_text(path)
    except FileNotFoundError:
        return
    fs.write_atomic(path, _lines_up_to(text, max_step))


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


def _grid_rgb(images: np.ndarray, ncols: int | None = None) -> np.ndarray:
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


def update_plots(workdir: str) -> list[str]:
    """Redraws WORKDIR/plots/*.png from metrics.jsonl; returns the paths written.

    Plots: losses, Wasserstein estimate, gradient penalty and the critic's input-gradient norms,
    parameter gradient norms (log scale, per layer when logged), unit health (dead/saturated
    fractions, diversity) and one panel per `eval/*` metric. A plot whose metrics were never
    logged is skipped. Series are thinned to ~2,000 points; about a second of CPU for 10k rows.
    """
    try:
        rows = read_jsonl(fs.join(workdir, METRICS_FILE))
    except FileNotFoundError:
        return []
    if not rows:
        return []
    out_dir = fs.join(workdir, PLOTS_DIR)
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


class MetricWriter:
    """Writes metrics, events, histograms and images of one run (process 0 only).

    `enabled=False` makes every method a no-op, so all processes can call the same code.
    `resume_step`: when a run resumes from a checkpoint at that step, the metric and event lines
    after it (written before the interruption) are dropped, atomically, and TensorBoard is told to
    purge its later records, so the logs read as one uninterrupted run. For a URL workdir
    (`gs://...`) TensorBoard is off: tensorboardX's gs:// writer would keep each whole event
    file (histograms, images) in memory and upload it again on every flush.
    """

    def __init__(
        self,
        workdir: str,
        *,
        enabled: bool = True,
        tensorboard: bool = True,
        resume_step: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.enabled = enabled
        self._metrics = None
        self._events = None
        self._tb = None
        if not enabled:
            return
        fs.makedirs(workdir)
        self.metrics_path = fs.join(workdir, METRICS_FILE)
        self.events_path = fs.join(workdir, EVENTS_FILE)
        if resume_step is not None:
            _truncate_jsonl(self.metrics_path, resume_step)
            _truncate_jsonl(self.events_path, resume_step)
        self._metrics = fs.Appender(self.metrics_path)
        self._events = fs.Appender(self.events_path)
        if tensorboard and fs.is_remote(workdir):
            log.info("TensorBoard is off for the remote workdir %s; metrics.jsonl holds every "
                     "scalar", workdir)
        elif tensorboard:
            from tensorboardX import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(logdir=workdir, purge_step=purge, flush_secs=30)

    def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """Appends `{"step": step, **scalars}` to metrics.jsonl (flushed) and to TensorBoard."""
        if not self.enabled:
            return
        row = {"step": int(step)}
        row.update({str(k): v for k, v in scalars.items()})
        self._metrics.write(_dumps(row) + "\n")
        self._metrics.flush()
        if self._tb is not None:
            for key, value in scalars.items():
                try:
                    number = float(np.asarray(value))
                except (TypeError, ValueError):
                    continue
                self._tb.add_scalar(str(key), number, int(step))

    def write_histograms(self, step: int, arrays: Mapping[str, np.ndarray]) -> None:
        """TensorBoard histograms (non-finite entries are dropped first)."""
        if not self.enabled or self._tb is None:
            return
        for key, array in arrays.items():
            values = np.asarray(array, dtype=np.float64).ravel()
            values = values[np.isfinite(values)]
            if values.size:
                self._tb.add_histogram(str(key), values, int(step))

    def write_images(self, step: int, name: str, images: np.ndarray) -> None:
        """[N, H, W, C] images in [-1, 1] as one TensorBoard grid (RGBA over a checkerboard)."""
        if not self.enabled or self._tb is None:
            return
        self._tb.add_image(name, _grid_rgb(images), int(step), dataformats="HWC")

    def write_event(self, event: Mapping) -> None:
        """Appends one event (step, rule, message, advice, evidence) to events.jsonl."""
        if not self.enabled:
            return
        self._events.write(_dumps(event) + "\n")
        self._events.flush()

    def flush(self) -> None:
        if not self.enabled:
            return
        self._metrics.flush()
        self._events.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        for f in (self._metrics, self._events):
            if f is not None and not f.closed:
                f.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
