"""A one-line progress bar: step count, loss, throughput and ETA (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Redraws ``\\r``-style on a terminal; elsewhere prints only each finished line."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, width: int = 24) -> None:
        self.total, self.label, self.width = max(1, total), label, width
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.done = 0
        self.samples = 0

    def line(self, loss: float, extra: str = "") -> str:
        """The current bar as text."""
        elapsed = time.perf_counter() - self.start
        rate = self.samples / elapsed if elapsed > 0 else 0.0
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        fill = int(self.width * self.done / self.total)
        bar = "#" * fill + "-" * (self.width - fill)
        return (
            f"{self.label} [{bar}] {self.done}/{self.total} loss {loss:.4f} "
            f"{rate:,.0f} samples/s ETA {_clock(eta)}{extra}"
        )

    def update(self, samples: int, loss: float) -> None:
        """One more step of ``samples`` examples with this loss."""
        self.done += 1
        self.samples += samples
        if self.tty:
            self.stream.write("\r" + self.line(loss))
            self.stream.flush()

    def close(self, loss: float, extra: str = "") -> None:
        """Ends the line (printed once when not on a terminal)."""
        self.stream.write(("\r" if self.tty else "") + self.line(loss, extra) + "\n")
        self.stream.flush()
