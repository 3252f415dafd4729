"""A step callable measured into the store, through the same sweep as a throughput config: the
run opened before, the record stored the moment it exists, a failure stored as a row."""

from __future__ import annotations

from typing import Any, Callable

from dlbench.jobs.sweep import SweepOutcome, run_sweep
from dlbench.launch.failures import failure_record, release_memory
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store
from dlbench.workloads.custom_step import measure_callable


class StepLauncher:
    """Measures the one step callable it holds, in this process (a callable cannot be sent to
    another); an exception becomes a failure record, as the inline launcher makes it."""

    name = "inline"
    survives_fatal = False

    def __init__(self, step: Callable[[], Any], unit: str, units_per_sample: int = 1) -> None:
        self.step, self.unit, self.units_per_sample = step, unit, units_per_sample

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord:
        try:
            return measure_callable(self.step, cfg, env, unit=self.unit,
                                    units_per_sample=self.units_per_sample)
        except Exception as exc:  # failures are data (KeyboardInterrupt is not an Exception)
            record = failure_record(cfg, env, exc)
        release_memory()  # outside the except block: the traceback's frames are gone
        return record


def run_step(step: Callable[[], Any], cfg: ThroughputConfig, db: str, command: str, env: dict,
             *, unit: str, units_per_sample: int = 1, tag: str | None = None) -> SweepOutcome:
    """``step`` measured as ``cfg`` into ``db``, a run of one result."""
    with Store(db) as store:
        return run_sweep([cfg], store, StepLauncher(step, unit, units_per_sample), env,
                         command=command, suite=None, tag=tag)
