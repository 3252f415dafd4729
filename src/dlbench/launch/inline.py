"""Run a benchmark in this process: no start-up cost, and the default.

An out-of-memory is caught and the cache released, so the sweep goes on. An error that leaves
CUDA unusable (illegal memory access) cannot be recovered in-process: the record says so and the
sweep stops; ``--isolate`` runs each benchmark in a fresh process instead.
"""

from __future__ import annotations

from dlbench.config import ThroughputConfig
from dlbench.launch.failures import failure_record, release_memory
from dlbench.results import ThroughputRecord
from dlbench.workloads import throughput


class InlineLauncher:
    name = "inline"
    # After a fatal error the process must not measure again.
    survives_fatal = False

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord:
        try:
            return throughput.measure(cfg, env)
        except Exception as exc:  # failures are data (KeyboardInterrupt is not an Exception)
            record = failure_record(cfg, env, exc)
        # Outside the except block the traceback, and the tensors its frames hold, are gone.
        release_memory()
        return record
