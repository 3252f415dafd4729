"""A sweep: configs -> launcher -> records -> store, one result at a time.

Each record is stored the moment it exists, so an interrupted sweep keeps everything measured
before the interruption, and ``--resume`` picks up where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from dlbench import env as envmod
from dlbench.records.base import ErrorType, new_id
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store


class Launcher(Protocol):
    name: str
    survives_fatal: bool

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord: ...


class Progress(Protocol):
    def begin(self, total: int) -> None: ...
    def start(self, cfg: ThroughputConfig) -> None: ...
    def done(self, record: ThroughputRecord) -> None: ...
    def skipped(self, cfg: ThroughputConfig) -> None: ...
    def end(self) -> None: ...


class NullProgress:
    def begin(self, total: int) -> None: pass
    def start(self, cfg: ThroughputConfig) -> None: pass
    def done(self, record: ThroughputRecord) -> None: pass
    def skipped(self, cfg: ThroughputConfig) -> None: pass
    def end(self) -> None: pass


def env_key(env: dict) -> str:
    """A short hash of what makes results comparable (GPU, driver, CUDA, torch, ...)."""
    blob = json.dumps(envmod.identity(env), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class SweepOutcome:
    run_id: str
    records: list[ThroughputRecord] = field(default_factory=list)
    skipped: int = 0
    status: str = "running"          # done | interrupted | fatal
    message: str | None = None


def run_sweep(configs: Sequence[ThroughputConfig], store: Store, launcher: Launcher, env: dict,
              command: str, suite: str | None = None, tag: str | None = None,
              resume: bool = False, progress: Progress | None = None) -> SweepOutcome:
    """Measure ``configs`` in order, storing each record as it comes.

    On Ctrl-C the run is marked interrupted, the outcome says so, and nothing stored is lost.
    """
    progress = progress or NullProgress()
    key = env_key(env)
    outcome = SweepOutcome(run_id=new_id())
    store.start_run(outcome.run_id, command, env, key, envmod.device_label(env), suite, tag)
    done = store.measured_keys(key) if resume else set()
    progress.begin(len(configs))
    try:
        for cfg in configs:
            if cfg.key() in done:
                outcome.skipped += 1
                progress.skipped(cfg)
                continue
            progress.start(cfg)
            record = launcher.run(cfg, env).with_run(outcome.run_id)
            store.add(record, key)
            done.add(cfg.key())  # a config listed twice is measured once
            outcome.records.append(record)
            progress.done(record)
            if record.error_type == ErrorType.FATAL and not launcher.survives_fatal:
                outcome.status = "fatal"
                outcome.message = ("a fatal device error left this process unable to measure; "
                                   "rerun with --resume --isolate to go on in fresh processes")
                break
        else:
            outcome.status = "done"
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        outcome.message = (f"interrupted: {len(outcome.records)} result(s) of this run are kept in "
                           f"{store.path}; rerun the same command with --resume to go on")
    finally:
        progress.end()
        store.finish_run(outcome.run_id, outcome.status)
    return outcome
