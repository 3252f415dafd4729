"""MLPerf logging (the ``mlperf-logging`` package's mllog) and its compliance checker.

Each run writes its own MLPerf log: ``:::MLLOG {json}`` lines for init, run start and stop,
every epoch and evaluation, the seed, the batch size and the sample counts. The log's clock is
the run's own clock, anchored once to the wall clock, so ``run_stop - run_start`` in the log is
exactly the time to train in the record.

The checker is MLPerf's own, run as ``python -m mlperf_logging.compliance_checker`` with
dlbench's rules file (``rules/dlbench_train.yaml``, shipped in the package): a log passes when
it is well formed (init before run, epochs and evaluations in order, one seed, one batch size)
and its run stopped with ``success`` at an evaluation that reached its target. A run that failed
writes a log that says ``aborted`` and does not pass, as MLPerf's result summarizer counts it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

INSTALL_HINT = ("MLPerf logging needs the mlperf-logging package: pip install 'dlbench[train]' "
                "(or pip install mlperf-logging); or pass --no-mllog to train without MLPerf logs")

#: The benchmark name a dlbench log declares, checked by the rules file.
BENCHMARK_PREFIX = "dlbench_"


class MLPerfUnavailable(ImportError):
    pass


def available() -> bool:
    """Whether mlperf_logging can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("mlperf_logging") is not None
    except (ImportError, ValueError):
        return False


def rules_path() -> Path:
    """dlbench's rules file for the compliance checker (package data)."""
    return Path(str(resources.files("dlbench.training") / "rules" / "dlbench_train.yaml"))


class NullLog:
    """What ranks other than 0 (and ``--no-mllog`` runs) log to: nothing."""

    def event(self, key: str, value: Any = None, metadata: dict | None = None,
              t: float | None = None) -> None:
        pass

    start = end = event

    def text(self) -> str | None:
        return None


class MLPerfLog:
    """A run's MLPerf log, kept in memory (the caller stores it with the record).

    ``clock`` is the run's clock (seconds); its readings become ``time_ms`` on the wall-clock
    scale, so every interval in the log is an interval of the run's clock.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        try:
            from mlperf_logging.mllog import mllog  # optional (dlbench[train]); see INSTALL_HINT
        except ImportError:
            raise MLPerfUnavailable(INSTALL_HINT) from None
        self._clock = clock
        self._origin = (clock(), time.time() * 1e3)
        self._buf = io.StringIO()
        # A logger of our own, not registered with logging's manager: one per run, no global state.
        logger = logging.Logger(f"dlbench.mllog.{id(self)}", logging.INFO)
        handler = logging.StreamHandler(self._buf)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        self._log = mllog.MLLogger(logger=logger, default_stack_offset=2)

    def _ms(self, t: float | None) -> float:
        t0, wall0 = self._origin
        return round(wall0 + ((self._clock() if t is None else t) - t0) * 1e3, 3)

    def event(self, key: str, value: Any = None, metadata: dict | None = None,
              t: float | None = None) -> None:
        self._log.event(key, value, metadata=metadata, time_ms=self._ms(t))

    def start(self, key: str, value: Any = None, metadata: dict | None = None,
              t: float | None = None) -> None:
        self._log.start(key, value, metadata=metadata, time_ms=self._ms(t))

    def end(self, key: str, value: Any = None, metadata: dict | None = None,
            t: float | None = None) -> None:
        self._log.end(key, value, metadata=metadata, time_ms=self._ms(t))

    def text(self) -> str:
        return self._buf.getvalue()


def make_log(enabled: bool, rank: int, clock: Callable[[], float] = time.perf_counter):
    return MLPerfLog(clock) if enabled and rank == 0 else NullLog()


def run_times_ms(text: str) -> tuple[float | None, float | None]:
    """``run_start`` and ``run_stop`` times of a log (ms), as MLPerf's summarizer reads them."""
    start = stop = None
    for line in text.splitlines():
        if ":::MLLOG" not in line:
            continue
        d = json.loads(line.split(":::MLLOG", 1)[1])
        if d["key"] == "run_start":
            start = float(d["time_ms"])
        elif d["key"] == "run_stop":
            stop = float(d["time_ms"])
    return start, stop


def latest_ruleset() -> str | None:
    """The newest training ruleset of the installed checker (its log parser; dlbench's rules
    file replaces the benchmark rules)."""
    try:
        spec = importlib.util.find_spec("mlperf_logging")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    found = []
    for root in spec.submodule_search_locations:
        for p in (Path(root) / "compliance_checker").glob("training_*"):
            m = re.fullmatch(r"training_(\d+)\.(\d+)\.(\d+)", p.name)
            if m:
                found.append(tuple(int(x) for x in m.groups()))
    return ".".join(map(str, max(found))) if found else None


@dataclass(frozen=True)
class Compliance:
    """The checker's verdict on one log."""

    passed: bool
    ruleset: str
    rules: str
    output: str          # what the checker printed (its last lines)
    returncode: int

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "ruleset": self.ruleset, "rules": self.rules,
                "output": self.output, "returncode": self.returncode}


def check_log(log_path: str | Path, rules: str | Path | None = None, timeout_s: float = 120.0
              ) -> Compliance:
    """Run ``python -m mlperf_logging.compliance_checker`` on one log file with dlbench's rules."""
    if not available():
        raise MLPerfUnavailable(INSTALL_HINT)
    ruleset = latest_ruleset() or "4.0.0"
    # Absolute paths: the checker runs in a scratch folder (it writes its own log file there).
    rules = str(Path(rules or rules_path()).resolve())
    log_path = Path(log_path).resolve()
    with tempfile.TemporaryDirectory(prefix="dlbench-cc-") as tmp:
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
               "--ruleset", ruleset, "--config", rules, "--log_output",
               os.path.join(tmp, "checker.log"), str(log_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
    out = (proc.stdout + proc.stderr).strip()
    return Compliance(proc.returncode == 0, ruleset, rules, out[-4000:], proc.returncode)
