"""Child side of the subprocess launcher: read a config on stdin, write one record to a file."""

from __future__ import annotations

import json
import sys

from dlbench.launch.inline import InlineLauncher
from dlbench.launch.signals import exit_with_parent
from dlbench.records.throughput import ThroughputConfig


def main() -> int:
    exit_with_parent()  # a parent killed with SIGKILL must not leave this probe computing
    job = json.load(sys.stdin)
    cfg = ThroughputConfig.from_dict(job["config"])
    record = InlineLauncher(count_flops=job.get("count_flops", True),
                            idle_baseline=job.get("idle_baseline", True)).run(cfg, job["env"])
    with open(job["out"], "w") as f:
        json.dump(record.to_dict(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
