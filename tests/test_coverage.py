"""Coverage of the step-time interval on simulated GPU step series.

A window of step times is simulated as a stationary AR(1) series around a known mean (100 ms
steps with 1% noise, as a steady GPU gives), with lag-1 correlation ``phi`` from 0 to 0.6 (the
committed records show up to 0.41). The stated 95% interval of the mean must contain the true
mean in at least 93% of the windows, for short windows (8, 15, 30, 100 steps: the
effective-sample-size interval) and long ones (250 and 1,000 steps: batch means). The method
dlbench used before (batch means at every length, so a plain t over single steps below 40 steps)
is shown to fall short, so that the test could fail. Last, benchmarks/coverage.py (the same
question asked of real processes on a GPU) runs on the CPU with a tiny model.
"""

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.measure import stats

MEAN_S = 0.100
NOISE_S = 0.001
REPS = 1000
PHIS = (0.0, 0.2, 0.4, 0.6)


def ar1_window(n: int, phi: float, rng: random.Random) -> list[float]:
    """``n`` step times of a stationary AR(1) process around MEAN_S with marginal sd NOISE_S."""
    x = rng.gauss(0.0, 1.0)                      # a stationary start: no burn-in needed
    innovation = math.sqrt(1.0 - phi * phi)
    out = []
    for _ in range(n):
        out.append(MEAN_S + NOISE_S * x)
        x = phi * x + innovation * rng.gauss(0.0, 1.0)
    return out


def coverage(n: int, phi: float, half_width, reps: int = REPS) -> float:
    rng = random.Random(f"{n}-{phi}")            # fixed seed per cell
    hits = 0
    for _ in range(reps):
        xs = ar1_window(n, phi, rng)
        hits += abs(stats.mean(xs) - MEAN_S) <= half_width(xs)
    return hits / reps


@pytest.mark.parametrize("n", [8, 15, 30, 100, 250, 1000])
def test_interval_covers_the_true_mean(n):
    expected = stats.BATCH_MEANS if n >= 200 else stats.ESS
    assert stats.interval(ar1_window(n, 0.3, random.Random(0))).method == expected
    got = {phi: coverage(n, phi, stats.mean_interval) for phi in PHIS}
    assert all(c >= 0.93 for c in got.values()), f"{n} steps: coverage by phi {got}"


def test_the_old_method_undercovers_correlated_short_windows():
    # One-step blocks: a plain t over steps whose lag-1 correlation is 0.4 states 95% and
    # covers about 80%.
    old = coverage(15, 0.4, stats.mean_interval_batch_means)
    new = coverage(15, 0.4, stats.mean_interval)
    assert old < 0.88 < 0.93 <= new, (old, new)


def test_across_process_interval_covers():
    # Independent process figures (3 per group, as the suites' repeats): the t-interval with
    # 2 degrees of freedom covers the true mean 95% of the time.
    rng = random.Random(3)
    hits = 0
    for _ in range(REPS):
        figures = [rng.gauss(1000.0, 20.0) for _ in range(3)]
        m, h = stats.across_processes(figures)
        hits += abs(m - 1000.0) <= h
    assert 0.93 <= hits / REPS <= 0.97


def test_the_coverage_experiment_runs_through_dlbench(tmp_path):
    # benchmarks/coverage.py on the CPU: 2 configs of the smoke suite x 3 fresh processes.
    root = Path(__file__).resolve().parents[1]
    db, out = tmp_path / "cov.db", tmp_path / "cov.json"
    env = dict(os.environ, PYTHONPATH=str(root / "src"), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "coverage.py"), "--suite",
                        "smoke", "--configs", "tiny_cnn:train,tiny_cnn:eval", "--processes", "3",
                        "--group", "2", "--device", "cpu", "--db", str(db), "--out", str(out),
                        "--other", str(db)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [c["processes"] for c in result["configs"]] == [3, 3]
    assert [c["group"]["combinations"] for c in result["configs"]] == [3, 3]
    for c in result["configs"]:
        assert c["reference"] == pytest.approx(sum(c["process_figures"]) / 3)
        assert 0 <= c["one_process"]["new_covered"] <= 3
        assert sum(c["interval_methods"].values()) == 3
    assert 0 <= result["one_process"]["new_rate"] <= 1 and result["one_process"]["n"] == 6
    assert result["env"]["accelerator"] == "cpu"
    assert len(result["commands"]) == 2 and "--repeat 3" in result["commands"][0]
    # the store against itself: no difference between the "cards"
    assert [c["difference_rel"] for c in result["other"]["cards"]] == [0.0, 0.0]
    assert "one process's 95% interval covers the reference" in p.stdout
