"""A run in the store around records that come one at a time: peak points, collective sizes,
emulated-link windows, training runs, maxbatch probes.

``dlbench.jobs.sweep.run_sweep`` does this for a list of throughput configs; :class:`StoredRun`
is the same life cycle for every other command: the run is opened before the first record, each
record is stored the moment it exists (so Ctrl-C or a crash loses none), and the run is closed
with what happened to it. It prints nothing.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable

from dlbench import env as envmod
from dlbench.launch import signals, tempdirs
from dlbench.records.base import new_id
from dlbench.store import Store

#: How a run ended, as the ``runs`` table says it.
DONE, INTERRUPTED, FAILED = "done", "interrupted", "failed"


class StoredRun:
    """``with StoredRun(store, command, env) as run: run.add(record)``.

    The run is ``done`` when the block ends, ``interrupted`` on Ctrl-C and ``failed`` on any
    other exception; the exception is not swallowed. ``on_record`` sees each record once it is
    stored (a progress line).
    """

    def __init__(self, store: Store, command: str, env: dict, *, device: str | None = None,
                 suite: str | None = None, tag: str | None = None,
                 on_record: Callable[[Any], None] | None = None) -> None:
        self.store, self.command, self.env = store, command, env
        self.device = device if device is not None else envmod.device_label(env)
        self.suite, self.tag = suite, tag
        self.on_record = on_record
        self.run_id = new_id()
        self.env_key = envmod.env_key(env)
        self.records: list = []
        self.status = "running"

    def __enter__(self) -> StoredRun:
        signals.check()  # a Ctrl-C lost in start-up's imports ends it here, before a run opens
        tempdirs.remove_stale()  # a SIGKILLed dlbench's folder goes with the next run, inline too
        self.store.start_run(self.run_id, self.command, self.env, self.env_key, self.device,
                             self.suite, self.tag)
        return self

    def add(self, record: Any) -> Any:
        """Store ``record`` as a result of this run, now; return it as stored."""
        record = record.with_run(self.run_id)
        self.store.add(record, self.env_key)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.status = DONE
        elif issubclass(exc_type, KeyboardInterrupt):
            self.status = INTERRUPTED
        else:
            self.status = FAILED
        self.store.finish_run(self.run_id, self.status)

    @property
    def interrupted(self) -> bool:
        return self.status == INTERRUPTED

    def any_failed(self) -> bool:
        """Whether a stored record is a failure (an error row)."""
        return any(not r.ok for r in self.records)

