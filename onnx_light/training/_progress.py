"""The training bar: steps, loss, samples/s and ETA, drawn by tqdm.

On a terminal tqdm redraws the bar in place (at most every ``mininterval`` seconds, so a fast
step pays no terminal write). Elsewhere (a log file, a pipe, the tests) nothing is drawn while
the loop runs and ``close`` prints the finished line once, formatted by the same tqdm template
with ASCII blocks: a log holds one plain line per epoch, no carriage returns.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["Progress"]

#: one template for the live bar and the plain line; ``{postfix}`` is ", loss ..., N samples/s"
_FORMAT = "{desc} |{bar:24}| {n_fmt}/{total_fmt} [ETA {remaining}{postfix}]"


#: the size of a terminal that reports none (a fresh pty, `script`, some CI runners), where tqdm
#: would hide the bar (it places a bar below a screen of height 0 out of sight)
_FALLBACK_SIZE = (100, 24)


def _unsized(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that reports 0 columns or 0 lines."""
    try:
        columns, lines = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return columns == 0 or lines == 0


class Progress:
    """A bar of ``total`` steps labelled ``label``, written to ``stream`` (stdout); ``quiet``: nothing."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        from tqdm import tqdm

        self.total, self.label = max(1, total), label
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.quiet = quiet
        self.start = time.perf_counter()
        self.done = self.samples = 0
        ncols, nrows = _FALLBACK_SIZE if self.tty and _unsized(self.stream) else (None, None)
        self.bar = tqdm(
            total=self.total,
            desc=label,
            file=self.stream,
            bar_format=_FORMAT,
            disable=quiet or not self.tty,
            leave=True,
            ncols=ncols,
            nrows=nrows,
        )

    def _postfix(self, loss: float) -> str:
        elapsed = time.perf_counter() - self.start
        rate = self.samples / elapsed if elapsed > 0 else 0.0
        return f"loss {loss:.4f}, {rate:,.0f} samples/s"

    def update(self, samples: int, loss: float) -> None:
        """One more step of ``samples`` examples with this loss."""
        self.done += 1
        self.samples += samples
        if self.tty and not self.quiet:
            self.bar.set_postfix_str(self._postfix(loss), refresh=False)
            self.bar.update(1)

    def close(self, loss: float, metrics: str = "") -> None:
        """Ends the bar with the final loss; ``metrics`` (validation) follow on a line of their own."""
        if self.quiet:
            return
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
