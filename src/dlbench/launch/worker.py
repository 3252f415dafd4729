"""Child side of the subprocess launcher: read a config on stdin, write one record to a file.

The same job runs in a process started for it (``python -m dlbench.launch.worker``) or in one
forked by the zygote (:mod:`dlbench.launch.zygote`); both call :func:`run_job`. The job names its
worker as the parent's launcher was handed it (``job["worker"]``, made by
:func:`dlbench.launch.lookup.worker_name`); this process imports it by that name.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from dlbench.launch.inline import InlineLauncher
from dlbench.launch.lookup import find_worker
from dlbench.launch.signals import exit_with_parent
from dlbench.records import RECORD_TYPES, Record


def run_job(job: dict) -> None:
    """Measure ``job["config"]`` (of the record kind ``job["kind"]``, throughput when none is
    named) with the worker ``job["worker"]`` and write its record (as JSON) to ``job["out"]``."""
    kind = job.get("kind", "throughput")
    cfg = RECORD_TYPES[kind].config_type.from_dict(job["config"])
    record = InlineLauncher({kind: _imported_when_called(job["worker"])},
                            count_flops=job.get("count_flops", True),
                            idle_baseline=job.get("idle_baseline", True)).run(cfg, job["env"])
    with open(job["out"], "w") as f:
        json.dump(record.to_dict(), f)


def _imported_when_called(name: str) -> Callable[..., Record]:
    """The worker ``name``, imported when the launcher calls it: an import that fails is the
    record's failure (an error row), as any other failure of the worker."""
    def measure(*args: Any, **kwargs: Any) -> Record:
        return find_worker(name)(*args, **kwargs)
    return measure


def main() -> int:
    exit_with_parent()  # a parent killed with SIGKILL must not leave this probe computing
    run_job(json.load(sys.stdin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
