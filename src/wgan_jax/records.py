"""The run's records (process 0): metrics.jsonl, events.jsonl, TensorBoard, and the plots of them.

Files written under WORKDIR:

* `metrics.jsonl`: one JSON object per call of `write_scalars`, `{"step": N, "name": value, ...}`.
  Values are plain JSON numbers; a non-finite value (NaN, +-inf) is written as `null`, so every
  line is strict JSON that any reader accepts (TensorBoard still receives the raw value).
* `events.jsonl`: one JSON object per health/guard event (`write_event`), each made by `event`.
* `events.out.tfevents.*`: TensorBoard scalars, histograms and images, through tensorboardX
  (which does not import TensorFlow).
* `plots/*.png`: `update_plots` redraws these from `metrics.jsonl` (drawn by `wgan_jax.plots`).
* `logs-before-<UTC time>/`: `set_aside_logs` moves an earlier attempt's logs there when a run
  starts from step 0 (no checkpoint to resume), so the logs above are one run's.

WORKDIR may be a URL such as `gs://bucket/run` (see `wgan_jax.fs`): the JSONL logs are rewritten
whole on each flush, and TensorBoard is off (metrics.jsonl holds every scalar).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from wgan_jax import fs, plots

__all__ = ["MetricWriter", "read_jsonl", "event", "json_safe", "METRICS_FILE", "EVENTS_FILE"]

log = logging.getLogger("wgan_jax")

#: The run's metrics rows, one JSON object per line, in the workdir.
METRICS_FILE = "metrics.jsonl"
#: The health rules' events (`records.event`), one JSON object per line, in the workdir.
EVENTS_FILE = "events.jsonl"
PLOTS_DIR = "plots"
TENSORBOARD_PREFIX = "events.out.tfevents."
OLD_LOGS_PREFIX = "logs-before-"  # set_aside_logs: an earlier run's logs


def event(step: int, rule: str, message: str, advice: str = "", **evidence: Any) -> dict:
    """One event: `{"step", "rule", "message", "advice", "evidence": {...}}`.

    The one shape of every event a run records (trainer, health rules) and `diagnose` reads;
    non-finite float evidence becomes None, so the event is strict JSON.
    """
    return {"step": int(step), "rule": rule, "message": message, "advice": advice,
            "evidence": {k: _finite_or_none(v) for k, v in evidence.items()}}


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


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


def layer_grad_norm_histograms(row: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Per network, the per-layer gradient norms of a metrics row as one histogram's values.

    `grad_norm/critic/Dense_0`, `grad_norm/critic/Dense_1`, ... (logged at diagnostics.level
    "full") become `{"layer_grad_norms/critic": [n0, n1, ...]}`: how the gradient is spread over
    the layers at that step. Rows without per-layer norms give `{}`.
    """
    values: dict[str, list[float]] = {}
    for key, value in row.items():
        parts = str(key).split("/")
        if len(parts) >= 3 and parts[0] == "grad_norm":
            values.setdefault(f"layer_grad_norms/{parts[1]}", []).append(float(value))
    return {k: np.asarray(v, np.float64) for k, v in sorted(values.items())}


def update_plots(workdir: str) -> list[str]:
    """Redraws WORKDIR/plots/*.png from metrics.jsonl (see `plots.plot_metrics`); returns the
    paths written, none when nothing was logged yet."""
    try:
        rows = read_jsonl(fs.join(workdir, METRICS_FILE))
    except FileNotFoundError:
        return []
    return plots.plot_metrics(rows, fs.join(workdir, PLOTS_DIR))


def _log_files(workdir: str) -> list[str]:
    """The names of the run's log files directly in `workdir` (JSONL logs, TensorBoard's)."""
    try:
        names = fs.listdir(workdir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n in (METRICS_FILE, EVENTS_FILE)
                  or n.startswith(TENSORBOARD_PREFIX))


def set_aside_logs(workdir: str, when: float | None = None) -> str | None:
    """Moves the logs of an earlier run in `workdir` (metrics.jsonl, events.jsonl, TensorBoard
    event files) into `WORKDIR/logs-before-<UTC time>/`; returns that folder, None when there
    were none.

    For a run that starts from step 0 while logs exist (an earlier attempt was killed before
    its first checkpoint, or every checkpoint was unreadable): the new logs are then one run's
    logs, so plots and `diagnose` do not read two runs as one, and nothing is deleted.
    TensorBoard shows the set-aside files as a run of their own.
    """
    names = _log_files(workdir)
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if when is None else when))
    folder = fs.join(workdir, f"{OLD_LOGS_PREFIX}{stamp}")
    suffix = 1
    while fs.exists(folder):
        suffix += 1
        folder = fs.join(workdir, f"{OLD_LOGS_PREFIX}{stamp}-{suffix}")
    fs.makedirs(folder)
    for name in names:
        fs.rename(fs.join(workdir, name), fs.join(folder, name))
    return folder


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
        self._metrics: fs.Appender | None = None
        self._events: fs.Appender | None = None
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
        row: dict[str, Any] = {"step": int(step)}
        row.update({str(k): v for k, v in scalars.items()})
        assert self._metrics is not None  # enabled
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
        """TensorBoard histograms (non-finite entries are dropped first); see
        `layer_grad_norm_histograms` for the ones the trainer writes."""
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
        self._tb.add_image(name, plots.grid_rgb(images), int(step), dataformats="HWC")

    def write_event(self, event: Mapping) -> None:
        """Appends one event (step, rule, message, advice, evidence) to events.jsonl."""
        if not self.enabled:
            return
        assert self._events is not None  # enabled
        self._events.write(_dumps(event) + "\n")
        self._events.flush()

    def close(self) -> None:
        """Closes the files and the TensorBoard writer (a full disk loses only unflushed
        TensorBoard events)."""
        if not self.enabled:
            return
        for f in (self._metrics, self._events):
            if f is not None and not f.closed:
                f.close()
        if self._tb is not None:
            tb, self._tb = self._tb, None
            try:
                tb.close()
            except OSError:
                # A full disk: the unflushed TensorBoard events are lost. Mark its writer
                # closed, or tensorboardX's exit hook fails (and prints a traceback) again.
                for writer in (getattr(tb, "all_writers", None) or {}).values():
                    event_writer = getattr(writer, "event_writer", None)
                    worker = getattr(event_writer, "_worker", None)
                    if worker is not None and worker.is_alive():
                        worker.stop()
                    if event_writer is not None and hasattr(event_writer, "_closed"):
                        event_writer._closed = True
                raise

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
