"""Run each benchmark in a fresh Python process (``--isolate``).

A fresh process per benchmark means a fatal CUDA error, a leak or a fragmented allocator cannot
touch the next benchmark, at the price of the interpreter and CUDA start-up (a few seconds, which
is outside every measured window). The child gets the config as JSON on stdin and writes the
record as JSON to a file the parent names; the parent alone talks to the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from dlbench.launch import signals
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord


class SubprocessLauncher:
    name = "subprocess"
    survives_fatal = True

    def __init__(self, timeout_s: float | None = 1800.0, count_flops: bool = True,
                 idle_baseline: bool = True) -> None:
        """``count_flops=False`` leaves the record's FLOPs out: counting traces the model once
        more, seconds per process, which a memory probe does not need. ``idle_baseline=False``
        skips the wait for the GPU's idle power before the benchmark (up to 6 s)."""
        self.timeout_s = timeout_s
        self.count_flops = count_flops
        self.idle_baseline = idle_baseline

    def for_later_processes(self) -> "SubprocessLauncher":
        """The same launcher for the later processes of a repeat group: they take the first
        process's FLOP count (one model, one count) and its idle power (one card, one
        baseline), so that a group costs its windows, not seconds of waiting per process."""
        return SubprocessLauncher(self.timeout_s, count_flops=False, idle_baseline=False)

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord:
        with tempfile.TemporaryDirectory(prefix="dlbench-") as tmp:
            out_path = os.path.join(tmp, "record.json")
            payload = json.dumps({"config": cfg.to_dict(), "env": env, "out": out_path,
                                  "count_flops": self.count_flops,
                                  "idle_baseline": self.idle_baseline})
            # A session of its own: stopping it reaches everything it started, and a Ctrl-C
            # at the terminal reaches dlbench alone, which ends the worker itself.
            with subprocess.Popen(
                    [sys.executable, "-m", "dlbench.launch.worker"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=signals.child_env(), start_new_session=True) as proc:
                try:
                    _, stderr = proc.communicate(payload, timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    signals.stop([proc])
                    return self._failed(cfg, env, ErrorType.TIMEOUT,
                                        f"the worker ran past {self.timeout_s:.0f} s and was "
                                        "killed")
                except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: no worker outlives dlbench
                    signals.stop([proc])
                    raise
            if os.path.exists(out_path):
                with open(out_path) as f:
                    return ThroughputRecord.from_dict(json.load(f))
            return self._failed(cfg, env, ErrorType.CRASHED,
                                f"worker exited with code {proc.returncode} and wrote no result; "
                                f"its stderr ends:\n{stderr[-2000:]}")

    @staticmethod
    def _failed(cfg: ThroughputConfig, env: dict, kind: str, msg: str) -> ThroughputRecord:
        return ThroughputRecord(config=cfg, env=env, status="error", error_type=kind, error=msg)
