"""Progress reporting: a live bar with rate and ETA on a terminal, periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """Tracks iterations per second since a start step and renders `step/total, rate, ETA`."""

    def __init__(self, start: int, total: int, *, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._start_step = start
        self._start_time = time.monotonic()
        self._last_draw = 0.0

    def rate(self, step: int) -> float:
        elapsed = time.monotonic() - self._start_time
        done = step - self._start_step
        return done / elapsed if elapsed > 0 and done > 0 else 0.0

    def summary(self, step: int) -> str:
        rate = self.rate(step)
        eta = (self.total - step) / rate if rate > 0 else float("nan")
        percent = 100.0 * step / max(self.total, 1)
        eta_text = _duration(eta) if rate > 0 else "--:--"
        return f"{step}/{self.total} ({percent:.0f}%) {rate:.2f} it/s ETA {eta_text}"

    def update(self, step: int, extra: str = "") -> None:
        """Redraws the bar on a terminal (at most 10 times a second); silent otherwise."""
        if not self.interactive:
            return
        now = time.monotonic()
        if now - self._last_draw < 0.1 and step < self.total:
            return
        self._last_draw = now
        width = 24
        filled = int(width * step / max(self.total, 1))
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r[{bar}] {self.summary(step)} {extra}\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()
