"""Progress of long measurements, from the suite's processes to the operator's terminal.

The suite runs under pytest, in worker processes whose output is captured. A measurement that can
take minutes (an all-reduce over a pair, ib_write_bw, the burn) calls :func:`note` as it starts,
naming what it measures and its time budget; the line goes to ``progress.log`` in the run folder.
``gpucluster verify`` follows that file (:class:`Follower`) and prints each new line on stderr,
and, while nothing new comes, repeats the newest one with the time since it started at least every
10 s. stdout stays free for ``--json``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TextIO

FILE = "progress.log"
RUN_DIR_ENV = "GPUCLUSTER_RUN_DIR"
HEARTBEAT_S = 10.0


def note(text: str, *, budget_s: float | None = None, run_dir: str | Path | None = None) -> None:
    """Record that a measurement starts: ``text``, and its time budget when it has one."""
    folder = run_dir or os.environ.get(RUN_DIR_ENV)
    if not folder:
        return
    line = f"{time.time():.3f} {text.strip()}" + (f" (budget {budget_s:.0f} s)" if budget_s else "")
    data = (" ".join(line.split()) + "\n").encode()
    try:
        # One write on an O_APPEND descriptor: lines from concurrent workers never interleave.
        fd = os.open(Path(folder) / FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError:
        pass  # progress is a courtesy: a measurement never fails for it


class Follower:
    """Follows a run's progress.log and prints it on ``out`` until :meth:`stop`."""

    def __init__(self, run_dir: Path, out: TextIO, *, heartbeat_s: float = HEARTBEAT_S, poll_s: float = 0.5) -> None:
        self.path = run_dir / FILE
        self.out = out
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="verify-progress", daemon=True)
        self._offset = 0
        self._last: tuple[float, str] | None = None
        self._printed_at = time.monotonic()

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()

    def poll(self) -> None:
        """Print what is new; repeat the newest line when nothing was printed for a heartbeat."""
        for started, text in self._read_new():
            self._last = (started, text)
            self._print(text)
        if self._last and time.monotonic() - self._printed_at >= self.heartbeat_s:
            started, text = self._last
            self._print(f"still: {text}, {time.time() - started:.0f} s in")

    def _read_new(self) -> list[tuple[float, str]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self._offset += end
        out = []
        for raw in data[:end].decode(errors="replace").splitlines():
            stamp, _, text = raw.partition(" ")
            try:
                out.append((float(stamp), text))
            except ValueError:
                continue
        return out

    def _print(self, text: str) -> None:
        self.out.write(f"verify: {text}\n")
        self.out.flush()
        self._printed_at = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()
