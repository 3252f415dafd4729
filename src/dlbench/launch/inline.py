"""Run a benchmark in this process: no start-up cost, and the default.

An out-of-memory is caught and the cache released, so the sweep goes on. An error that leaves
CUDA unusable (illegal memory access) cannot be recovered in-process: the record says so and the
sweep stops; ``--isolate`` runs each benchmark in a fresh process instead. A model whose code
calls ``sys.exit`` (in its factory or its forward), or raises a BaseException of its own, ends
its row as a failure that says so, never dlbench with exit 0 and nothing measured.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from dlbench.launch.failures import (
    FATAL_HINT,
    failure_record,
    is_model_exit,
    model_exited,
    release_memory,
)
from dlbench.records import Record, record_type_for
from dlbench.records.base import ErrorType


class InlineLauncher:
    name = "inline"
    # After a fatal error the process must not measure again.
    survives_fatal = False

    def __init__(self, workers: Mapping[str, Callable[..., Record]], count_flops: bool = True,
                 idle_baseline: bool = True) -> None:
        """``workers`` maps a record kind (``"throughput"``, ``"generate"``) to the function
        that measures one config of that kind, ``measure(cfg, env[, flops=...]) -> Record``,
        handed over by the caller (:func:`dlbench.jobs.launchers.inline` wires
        :mod:`dlbench.workloads.workers`), so that this package imports no workload.
        ``idle_baseline=False`` asks it not to wait for the GPU's idle power first (a later
        process of a repeat group)."""
        self.workers = dict(workers)
        self.count_flops = count_flops
        self.idle_baseline = idle_baseline

    def run(self, cfg: Any, env: dict) -> Record:
        try:
            measure = self._worker(record_type_for(cfg).kind)
            kwargs = {} if self.idle_baseline else {"idle_baseline": False}
            if self.count_flops:
                return measure(cfg, env, **kwargs)
            return measure(cfg, env, flops=_no_flops, **kwargs)
        except Exception as exc:  # failures are data (KeyboardInterrupt is not an Exception)
            record = failure_record(cfg, env, exc)
        except BaseException as exc:
            if not is_model_exit(exc):  # Ctrl-C, SIGTERM, SIGHUP: the sweep's to handle
                raise
            # the model's code called sys.exit (or raised a BaseException of its own): a
            # failure, not dlbench's end
            record = failure_record(cfg, env, model_exited(exc))
        if record.error_type == ErrorType.FATAL:
            # Nothing can be released from a broken context (empty_cache would raise again);
            # this process must not measure any more, and the record says how to go on.
            return replace(record, error=f"{record.error}\n{FATAL_HINT}")
        # Outside the except block the traceback, and the tensors its frames hold, are gone.
        release_memory()
        return record

    def _worker(self, kind: str) -> Callable[..., Record]:
        try:
            return self.workers[kind]
        except KeyError:
            raise LookupError(f"this launcher was given no worker for {kind} configs (it "
                              f"has {', '.join(sorted(self.workers)) or 'none'})") from None


def _no_flops(spec, mode, size) -> None:
    return None
