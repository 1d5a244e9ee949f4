"""The training bar: steps, loss, samples/s and ETA, drawn by tqdm.

On a terminal tqdm redraws the bar in place (at most every ``mininterval`` seconds, so a fast
step pays no terminal write). Elsewhere (a log file, a pipe, the tests) nothing is drawn while
the loop runs and ``close`` prints the finished line once, formatted by the same tqdm template
with ASCII blocks: a log holds one plain line per epoch, no carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

#: one template for the live bar and the plain line; ``{postfix}`` is ", loss ..., N samples/s"
_FORMAT = "{desc} |{bar:24}| {n_fmt}/{total_fmt} [ETA {remaining}{postfix}]"


class Progress:
    """A bar of ``total`` steps labelled ``label``, written to ``stream`` (stdout)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        from tqdm import tqdm

        self.total, self.label = max(1, total), label
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.done = self.samples = 0
        self.bar = tqdm(
            total=self.total, desc=label, file=self.stream, bar_format=_FORMAT, disable=not self.tty, leave=True
        )

    def _postfix(self, loss: float) -> str:
        elapsed = time.perf_counter() - self.start
        rate = self.samples / elapsed if elapsed > 0 else 0.0
        return f"loss {loss:.4f}, {rate:,.0f} samples/s"

    def update(self, samples: int, loss: float) -> None:
        """One more step of ``samples`` examples with this loss."""
        self.done += 1
        self.samples += samples
        if self.tty:
            self.bar.set_postfix_str(self._postfix(loss), refresh=False)
            self.bar.update(1)

    def close(self, loss: float, metrics: str = "") -> None:
        """Ends the bar with the final loss; ``metrics`` (validation) follow on a line of their own."""
        postfix = self._postfix(loss)
        if self.tty:
            self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.close()
        else:
            from tqdm import tqdm

            elapsed = time.perf_counter() - self.start
            line = tqdm.format_meter(
                self.done, self.total, elapsed, prefix=self.label, bar_format=_FORMAT, postfix=postfix, ascii=True
            )
            self.stream.write(line + "\n")
        if metrics:
            self.stream.write(f"{self.label}: {metrics}\n")
        self.stream.flush()
