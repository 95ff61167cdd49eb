"""
The GPU's SM clock and power draw while something is timed: nvidia-smi sampled in the background.

An H200 training GPT-2 runs into its 700 W power limit within a fifth of a second of the first kernel, and its
SM clock then moves between about 1,400 and 1,980 MHz with the load (results/bench/LOG.md, session 12).
Two loops timed a second apart can run at clocks 10% apart: a ratio of two short timings means little
without the clocks they ran at. `ClockLog` samples them while a benchmark runs; `window(t0, t1)` gives
the median SM clock and power between two `time.time()` stamps.

    with ClockLog(interval_ms=50) as log:
        t0 = time.time(); run(); t1 = time.time()
        print(log.window(t0, t1))   # {'sm_mhz': 1800.0, 'sm_mhz_min': 1650, 'power_w': 690.2, 'samples': 24}

Without nvidia-smi (a CPU machine) the log is empty and window() returns None.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import shutil
import statistics
import subprocess
import threading
from typing import List, Optional, Sequence, Tuple

FIELDS = "timestamp,clocks.sm,power.draw"
Sample = Tuple[float, float, float]  # (epoch seconds, SM MHz, W)


def parse_line(line: str) -> Optional[Sample]:
    """One CSV line of `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits`,
    e.g. '2026/11/27 07:49:11.721, 1980, 121.72', as (epoch seconds, MHz, W). The timestamp is the machine's
    local time, as time.time() counts it. None for anything else (a header, '[N/A]', an empty line)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return t, float(parts[1]), float(parts[2])
    except ValueError:
        return None


def summarize(samples: Sequence[Sample], t0: float, t1: float) -> Optional[dict]:
    """Median (and lowest) SM clock and median power of the samples taken in [t0, t1]; None if none were."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return None
    return {"sm_mhz": statistics.median(s[1] for s in inside), "sm_mhz_min": min(s[1] for s in inside),
            "power_w": round(statistics.median(s[2] for s in inside), 1), "samples": len(inside)}


def physical_gpu() -> str:
    """nvidia-smi's index of this process's first GPU: CUDA_VISIBLE_DEVICES' first entry, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return first or "0"


class ClockLog:
    """nvidia-smi sampling SM clock and power every interval_ms while the context is open. `command`
    replaces the nvidia-smi command line (tests); without nvidia-smi nothing is sampled."""

    def __init__(self, interval_ms: int = 50, gpu: Optional[str] = None, command: Optional[List[str]] = None):
        if command is None and shutil.which("nvidia-smi"):
            command = ["nvidia-smi", "-i", gpu or physical_gpu(), f"--query-gpu={FIELDS}",
                       "--format=csv,noheader,nounits", "-lms", str(interval_ms)]
        self.command = command
        self.samples: List[Sample] = []
        self._proc = None
        self._reader = None

    @property
    def available(self) -> bool:
        return self.command is not None

    def __enter__(self) -> "ClockLog":
        if self.command is not None:
            self._proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
            atexit.register(self.__exit__)  # a run that ends by an exception does not leave nvidia-smi behind
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            s = parse_line(line)
            if s is not None:
                self.samples.append(s)

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._reader.join(timeout=5)
            self._proc = None
            atexit.unregister(self.__exit__)

    def window(self, t0: float, t1: float) -> Optional[dict]:
        return summarize(list(self.samples), t0, t1)
