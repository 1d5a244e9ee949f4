"""The training bar is tqdm's: live on a terminal, one plain line per epoch elsewhere."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from typing import TextIO

from tqdm import tqdm

from onnx_light.training import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(stream: TextIO, steps: int = 5) -> None:
    bar = Progress(steps, "epoch 1/2", stream)
    for k in range(steps):
        bar.update(8, 1.0 / (k + 1))
    bar.close(0.2, "val loss 0.3000 accuracy 90.0%")


def _run(stream: io.StringIO) -> str:
    _drive(stream)
    return stream.getvalue()


def test_a_log_gets_one_line_per_epoch_in_tqdms_format() -> None:
    out = _run(io.StringIO())
    assert "\r" not in out
    bar, metrics = out.splitlines()
    # the finished line as tqdm formats it (its template and ASCII blocks); rate and time vary
    expected = tqdm.format_meter(
        5,
        5,
        1.0,
        prefix="epoch 1/2",
        ascii=True,
        postfix="loss 0.2000, 0 samples/s",
        bar_format="{desc} |{bar:24}| {n_fmt}/{total_fmt} [ETA {remaining}{postfix}]",
    )
    assert re.sub(r"[\d,]+ samples/s", "N samples/s", bar) == re.sub(r"[\d,]+ samples/s", "N samples/s", expected)
    assert metrics == "epoch 1/2: val loss 0.3000 accuracy 90.0%"


def test_a_terminal_gets_tqdms_live_bar() -> None:
    out = _run(_Terminal())
    assert out.startswith("\repoch 1/2 |")  # tqdm draws the empty bar at once, then redraws in place
    last = out.rsplit("\r", 1)[1]
    assert "5/5 [ETA 00:00, loss 0.2000, " in last and "samples/s]" in last
    assert last.endswith("\nepoch 1/2: val loss 0.3000 accuracy 90.0%\n")


_SCRIPT = """
from onnx_light.training import Progress
bar = Progress(5, "epoch 1/2")
for k in range(5):
    bar.update(8, 1.0 / (k + 1))
bar.close(0.2, "val loss 0.3000 accuracy 90.0%")
"""


def test_a_terminal_that_reports_no_size_still_gets_the_bar() -> None:
    # stdout a fresh pty (0 columns, 0 lines, as under `script` or some CI runners), where tqdm
    # on its own hides the bar: the output had the metrics line only
    leader, follower = os.openpty()
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        subprocess.run([sys.executable, "-c", _SCRIPT], stdout=follower, env=env, check=True, timeout=120)
        os.set_blocking(leader, False)
        chunks = []
        while True:
            try:
                chunks.append(os.read(leader, 1 << 16))
            except BlockingIOError:
                break
    finally:
        os.close(leader)
        os.close(follower)
    out = b"".join(chunks).decode()
    assert "5/5 [ETA 00:00, loss 0.2000, " in out and "epoch 1/2: val loss 0.3000" in out


def test_quiet_writes_nothing_even_on_a_terminal() -> None:
    out = _Terminal()
    bar = Progress(3, "epoch 1/1", out, quiet=True)
    bar.update(8, 0.5)
    bar.close(0.5, "val loss 0.1")
    assert out.getvalue() == ""
