"""Child side of the subprocess launcher: read a config on stdin, write one record to a file.

The same job runs in a process started for it (``python -m dlbench.launch.worker``) or in one
forked by the zygote (:mod:`dlbench.launch.zygote`); both call :func:`run_job`.
"""

from __future__ import annotations

import json
import sys

from dlbench.launch.inline import InlineLauncher
from dlbench.launch.signals import exit_with_parent
from dlbench.records import RECORD_TYPES


def run_job(job: dict) -> None:
    """Measure ``job["config"]`` (of the record kind ``job["kind"]``, throughput when none is
    named) and write its record (as JSON) to ``job["out"]``."""
    cfg = RECORD_TYPES[job.get("kind", "throughput")].config_type.from_dict(job["config"])
    record = InlineLauncher(count_flops=job.get("count_flops", True),
                            idle_baseline=job.get("idle_baseline", True)).run(cfg, job["env"])
    with open(job["out"], "w") as f:
        json.dump(record.to_dict(), f)


def main() -> int:
    exit_with_parent()  # a parent killed with SIGKILL must not leave this probe computing
    run_job(json.load(sys.stdin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
