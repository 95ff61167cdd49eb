"""scripts/gpu_clock.py: nvidia-smi's CSV lines parsed, samples summarized over a time window, and the background
sampler run against a fake nvidia-smi (a Python loop printing lines in its format)."""
import datetime as dt
import sys
import time

import pytest

from scripts import gpu_clock


def test_parse_line_reads_nvidia_smi_csv_in_local_time():
    t, mhz, w = gpu_clock.parse_line("2026/11/27 07:49:11.721, 1980, 121.72\n")
    assert (mhz, w) == (1980.0, 121.72)
    assert t == pytest.approx(dt.datetime(2026, 11, 27, 7, 49, 11, 721000).timestamp())
    for bad in ("", "timestamp, clocks.current.sm [MHz], power.draw [W]", "2026/11/27 07:49:11.721, [N/A], 100",
                "2026/11/27 07:49:11.721, 1980", "2026/11/27 07:49:11.721, 1980, 121.72, 3"):
        assert gpu_clock.parse_line(bad) is None


def test_summarize_takes_the_samples_inside_the_window():
    samples = [(0.0, 1980.0, 120.0), (1.0, 1800.0, 690.0), (2.0, 1650.0, 700.0), (3.0, 1900.0, 680.0), (9.0, 1980.0, 130.0)]
    s = gpu_clock.summarize(samples, 1.0, 3.0)
    assert s == {"sm_mhz": 1800.0, "sm_mhz_min": 1650.0, "power_w": 690.0, "samples": 3}
    assert gpu_clock.summarize(samples, 4.0, 8.0) is None
    assert gpu_clock.summarize(samples, 3.0, 9.0)["sm_mhz_min"] == 1900.0  # the lowest inside the window only


def test_physical_gpu_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_clock.physical_gpu() == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_clock.physical_gpu() == "0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_clock.physical_gpu() == "0"  # never an empty -i for nvidia-smi


def test_clock_log_command_names_the_gpu_and_interval(monkeypatch):
    """nvidia-smi is asked for the GPU given (else this process's first) at the interval given."""
    monkeypatch.setattr(gpu_clock.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    cmd = gpu_clock.ClockLog(interval_ms=20, gpu="2").command
    assert cmd[:3] == ["nvidia-smi", "-i", "2"] and cmd[-2:] == ["-lms", "20"]
    assert gpu_clock.ClockLog().command[:3] == ["nvidia-smi", "-i", "5"]


FAKE_SMI = """
import datetime, sys, time
print('timestamp, clocks.current.sm [MHz], power.draw [W]', flush=True)
for i in range(400):
    now = datetime.datetime.now().strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]
    print(f'{now}, {1500 + i}, 650.5', flush=True)
    print(f'{now}, [N/A], [N/A]', flush=True)  # a reading the GPU did not give: skipped
    time.sleep(0.01)
"""


def test_clock_log_samples_in_the_background():
    with gpu_clock.ClockLog(command=[sys.executable, "-c", FAKE_SMI]) as log:
        assert log.available
        t0 = time.time()
        time.sleep(0.6)
        t1 = time.time()
    w = log.window(t0, t1)
    assert w is not None and w["samples"] >= 5 and w["power_w"] == 650.5
    assert 1500 <= w["sm_mhz_min"] < w["sm_mhz"]  # the fake clock rises sample by sample
    assert log.window(t1 + 60, t1 + 120) is None
    n = len(log.samples)
    time.sleep(0.1)
    assert len(log.samples) == n  # the sampler stopped with the context


def test_clock_log_without_nvidia_smi_is_empty(monkeypatch):
    monkeypatch.setattr(gpu_clock.shutil, "which", lambda name: None)
    with gpu_clock.ClockLog() as log:
        assert not log.available
    assert log.window(0, time.time()) is None
