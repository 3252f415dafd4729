"""MLPerf logging (the ``mlperf-logging`` package's mllog) and the rules checkers.

Each run writes its own MLPerf log: ``:::MLLOG {json}`` lines for init, run start and stop,
every epoch and evaluation, the seed, the batch size, the hyperparameters and the sample counts.
The log's clock is the run's own clock, anchored once to the wall clock, so
``run_stop - run_start`` in the log is exactly the time to train in the record. Where the
package is not installed, the same lines are written by dlbench itself (the format is MLPerf's:
one JSON object per line), so a machine without it still logs and checks every run.

Two checkers read a log, both against dlbench's rules (``rules/benchmarks.json``: each
benchmark's target accuracy, epoch cap and hyperparameters per global batch, fixed there, never
taken from the log): dlbench's own (:mod:`dlbench.training.compliance`, always), and MLPerf's,
``python -m mlperf_logging.compliance_checker`` with ``rules/dlbench_train.yaml`` generated
from the same rules, where the package is installed. A log passes when every checker that ran
passes it; the verdict says which ran. A run that failed writes a log that says ``aborted`` and
does not pass, as MLPerf's result summarizer counts it.
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

from dlbench.launch import tempdirs

INSTALL_HINT = ("MLPerf's own compliance checker needs the mlperf-logging package: pip install "
                "'dlbench[train]' (or pip install mlperf-logging); without it dlbench writes the "
                "logs itself and checks them with its own rules checker")

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

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 use_package: bool = True) -> None:
        self._clock = clock
        self._origin = (clock(), time.time() * 1e3)
        self._buf = io.StringIO()
        self._log = None
        try:
            if not use_package:
                raise ImportError("mlperf_logging")
            from mlperf_logging.mllog import mllog  # optional (dlbench[train]); see INSTALL_HINT
        except ImportError:
            return  # the lines are written by _write, in the same format
        # A logger of our own, not registered with logging's manager: one per run, no global state.
        logger = logging.Logger(f"dlbench.mllog.{id(self)}", logging.INFO)
        handler = logging.StreamHandler(self._buf)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        self._log = mllog.MLLogger(logger=logger, default_stack_offset=2)

    @property
    def writer(self) -> str:
        """Who writes the lines: ``mlperf_logging`` or ``dlbench`` (the package is absent)."""
        return "dlbench" if self._log is None else "mlperf_logging"

    def _write(self, event_type: str, key: str, value: Any, metadata: dict | None,
               t: float | None) -> None:
        """One line as mllog writes it: the caller's file and line, then the metadata."""
        caller = sys._getframe(2)
        meta = {"file": os.path.basename(caller.f_code.co_filename), "lineno": caller.f_lineno,
                **(metadata or {})}
        line = {"namespace": "", "time_ms": self._ms(t), "event_type": event_type, "key": key,
                "value": value, "metadata": meta}
        self._buf.write(":::MLLOG " + json.dumps(line) + "\n")

    def _ms(self, t: float | None) -> float:
        t0, wall0 = self._origin
        return round(wall0 + ((self._clock() if t is None else t) - t0) * 1e3, 3)

    def event(self, key: str, value: Any = None, metadata: dict | None = None,
              t: float | None = None) -> None:
        if self._log is None:
            return self._write("POINT_IN_TIME", key, value, metadata, t)
        self._log.event(key, value, metadata=metadata, time_ms=self._ms(t))

    def start(self, key: str, value: Any = None, metadata: dict | None = None,
              t: float | None = None) -> None:
        if self._log is None:
            return self._write("INTERVAL_START", key, value, metadata, t)
        self._log.start(key, value, metadata=metadata, time_ms=self._ms(t))

    def end(self, key: str, value: Any = None, metadata: dict | None = None,
            t: float | None = None) -> None:
        if self._log is None:
            return self._write("INTERVAL_END", key, value, metadata, t)
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
    """The checkers' verdict on one log.

    ``passed`` holds when every checker that ran passed it; ``checkers`` names them
    (``dlbench`` always; ``mlperf_logging`` where the package is installed); ``reasons`` are
    dlbench's checker's, one per rule broken. ``rules_version`` names the rules the verdict was
    reached under (:func:`dlbench.training.compliance.rules_version`): rules change, and a
    stored verdict holds only for the rules it names (:func:`recheck` re-checks under today's).
    """

    passed: bool
    ruleset: str | None
    rules: str
    output: str          # what the checkers printed (their last lines)
    returncode: int | None  # MLPerf's checker's exit code; None where it did not run
    checkers: tuple[str, ...] = ("dlbench",)
    reasons: tuple[str, ...] = ()
    rules_version: str | None = None
    mlperf_reasons: tuple[str, ...] = ()  # the rules MLPerf's checker named as failed

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "ruleset": self.ruleset, "rules": self.rules,
                "rules_version": self.rules_version,
                "output": self.output, "returncode": self.returncode,
                "checkers": list(self.checkers), "reasons": list(self.reasons),
                "mlperf_reasons": list(self.mlperf_reasons)}


def check_log(log_path: str | Path, rules: str | Path | None = None, timeout_s: float = 120.0,
              use_mlperf: bool | None = None) -> Compliance:
    """Check one log file against dlbench's rules: dlbench's checker, and MLPerf's
    ``python -m mlperf_logging.compliance_checker`` with the rules' YAML where the package is
    installed (``use_mlperf`` None) or asked for (True: an error where it is absent)."""
    from dlbench.training import compliance

    log_path = Path(log_path).resolve()
    ours = compliance.check_text(log_path.read_text())
    # Absolute paths: the checker runs in a scratch folder (it writes its own log file there).
    rules = str(Path(rules or rules_path()).resolve())
    version = compliance.rules_version(rules)
    if use_mlperf is None:
        use_mlperf = available()
    if not use_mlperf:
        note = "" if available() else " (mlperf-logging is not installed: MLPerf's checker " \
                                      "did not run)"
        return Compliance(ours.passed, None, str(recipe_rules()), ours.summary() + note, None,
                          ("dlbench",), ours.reasons, version)
    if not available():
        raise MLPerfUnavailable(INSTALL_HINT)
    ruleset = latest_ruleset() or "4.0.0"
    with tempfile.TemporaryDirectory(prefix="dlbench-cc-", dir=tempdirs.root()) as tmp:
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
               "--ruleset", ruleset, "--config", rules, "--log_output",
               os.path.join(tmp, "checker.log"), str(log_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
    out = (proc.stdout + proc.stderr).strip()
    return Compliance(proc.returncode == 0 and ours.passed, ruleset, rules,
                      (out[-3500:] + "\n" + ours.summary()).strip(), proc.returncode,
                      ("dlbench", "mlperf_logging"), ours.reasons, version,
                      tuple(mlperf_findings(out)))


def mlperf_verdict(output: str) -> str | None:
    """MLPerf's checker's own verdict line in its output (``SUCCESS`` or ``FAILED``, as its
    logger prints it), not dlbench's summary; None where it printed neither (it crashed)."""
    for line in reversed(output.splitlines()):
        m = re.fullmatch(r"(?:INFO|ERROR) - (SUCCESS|FAILED)", line.strip())
        if m:
            return m.group(1)
    return None


def mlperf_findings(output: str) -> list[str]:
    """The rules MLPerf's checker reports as failed, one line each, from its full output
    (its messages also print the log line and the state, which are left out here)."""
    out: list[str] = []
    key = None
    lines = output.splitlines()
    for i, line in enumerate(lines):
        text = line.strip().removeprefix("WARNING -").strip()
        m = re.match(r"CHECK for '([^']+)' failed", text)
        if m:
            key = m.group(1)
        elif text.startswith("failed test:"):
            out.append(f"{key or 'END'}: {text[len('failed test:'):].strip()}")
            key = None
        elif text.startswith("Failed executing CHECK code:") and i + 1 < len(lines):
            out.append(f"{key or 'END'}: error in {lines[i + 1].strip()}")
            key = None
        elif text.startswith(("Required ", "Failed checks for", "Failed executing code",
                              "Log lines had parsing errors", "No log lines detected")):
            out.append(text)
    return out


def recipe_rules() -> Path:
    """dlbench's rules (the benchmarks' targets and hyperparameters), the file both checkers
    read: the JSON directly, or the YAML generated from it."""
    from dlbench.training.recipe import rules_file

    return rules_file()


# -- Re-checking stored verdicts --------------------------------------------------------------
@dataclass(frozen=True)
class Recheck:
    """One stored MLPerf log re-checked under today's rules, beside the verdict stored with it.

    ``stored`` is the stored verdict (None: none stored, as for a bare log file);
    ``stored_rules`` the rules version it names (None: stored before verdicts named their rules).
    """

    id: str
    run_id: str | None
    label: str
    stored: bool | None
    stored_rules: str | None
    today: Compliance

    @property
    def setup(self) -> str:
        """The label less its seed: the runs of one setup are counted together."""
        return re.sub(r" seed=\d+", "", self.label)

    @property
    def changed(self) -> bool:
        return self.stored is not None and self.stored != self.today.passed


def recheck(path: str | Path, use_mlperf: bool | None = None) -> list[Recheck]:
    """Re-check the MLPerf logs of a store (``.db``, or ``.db.gz`` as committed) or one log
    file under today's rules, each beside its stored verdict. Nothing is written to the store."""
    import gzip

    from dlbench.store import Store

    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="dlbench-recheck-", dir=tempdirs.root()) as tmp:
        if path.suffix == ".gz":
            plain = Path(tmp) / path.stem
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                dst.write(src.read())
            path = plain
        with open(path, "rb") as f:
            is_store = f.read(16) == b"SQLite format 3\x00"
        if not is_store:
            return [Recheck(path.name, None, path.name, None, None,
                            check_log(path, use_mlperf=use_mlperf))]
        out = []
        with Store(path) as store:
            for rec in store.iter_results(kind="train"):
                if not rec.mllog:
                    continue
                log = Path(tmp) / f"{rec.id}.log"
                log.write_text(rec.mllog)
                stored = rec.compliance or {}
                out.append(Recheck(rec.id, rec.run_id, rec.config.label, stored.get("passed"),
                                   stored.get("rules_version"),
                                   check_log(log, use_mlperf=use_mlperf)))
        return out


def format_recheck(checks: list[Recheck], source: str) -> str:
    """The re-check as text: per log the stored and today's verdicts and the rules that fail
    today; per setup the logs passing, stored and today; then the totals."""
    from dlbench.training import compliance

    def word(v: bool | None) -> str:
        return "none" if v is None else ("passed" if v else "FAILED")

    checkers = sorted({c for r in checks for c in r.today.checkers}) or ["dlbench"]
    ruleset = next((r.today.ruleset for r in checks if r.today.ruleset), None)
    lines = [f"MLPerf log verdicts re-checked under today's rules ({compliance.rules_version()}; "
             f"checkers: {', '.join(checkers)}"
             + (f", MLPerf ruleset {ruleset}" if ruleset else "") + ")",
             f"source: {source}", ""]
    for r in checks:
        mine = ""
        if "mlperf_logging" in r.today.checkers:
            mine = f"; MLPerf's checker: {mlperf_verdict(r.today.output) or 'no verdict'}"
        lines.append(f"{r.id} run {r.run_id or '-'} {r.label}: stored {word(r.stored)} "
                     f"(rules {r.stored_rules or 'not recorded'}), today {word(r.today.passed)}"
                     f"{mine}{' (changed)' if r.changed else ''}")
        for reason in r.today.reasons:
            lines.append(f"    dlbench rules: {reason}")
        for reason in r.today.mlperf_reasons:
            lines.append(f"    MLPerf's checker: {reason}")
    lines += ["", "per setup (logs passing):"]
    setups: dict[tuple[str | None, str], list[Recheck]] = {}
    for r in checks:
        setups.setdefault((r.run_id, r.setup), []).append(r)
    for (run_id, setup), rs in setups.items():
        lines.append(f"  run {run_id or '-'}, {setup}: stored "
                     f"{sum(r.stored is True for r in rs)} of {len(rs)} passed, today "
                     f"{sum(r.today.passed for r in rs)} of {len(rs)} passed")
    lines += ["", f"total: {len(checks)} logs; stored {sum(r.stored is True for r in checks)} "
                  f"passed, today {sum(r.today.passed for r in checks)} passed; "
                  f"{sum(r.changed for r in checks)} verdicts changed"]
    return "\n".join(lines) + "\n"
