"""Energy per image: dlbench's telemetry against nvidia-smi's power log over the same window.

    python benchmarks/compare_power.py RECORD.json NVIDIA_SMI.csv

The independent check of dlbench's energy figure in docs/results/2026-11-h100.md;
benchmarks/single_gpu.sh OUTDIR energy makes both inputs and runs it. RECORD.json is one record
with telemetry: `dlbench throughput ... --json` output, or `dlbench results export --run RUN
--format json` of a stored one. NVIDIA_SMI.csv is `nvidia-smi -i GPU
--query-gpu=timestamp,power.draw --format=csv -lms 100`, run beside that measurement on its GPU.
nvidia-smi's timestamps are local wall-clock time and the record's `created_at` has 1 s
resolution, so 1-2 s are trimmed at the window's edges; recent drivers also average power.draw
over 1 s. A few percent of difference is expected. Prints one line; writes nothing.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys


def main(record_path: str, smi_path: str) -> int:
    rec = json.load(open(record_path))[0]
    s = rec["telemetry"]["summary"]
    end = dt.datetime.fromisoformat(rec["created_at"])
    window, samples = s["window_s"], s["samples"]
    lo, hi = end - dt.timedelta(seconds=window - 2), end - dt.timedelta(seconds=1)
    watts = []
    with open(smi_path) as f:
        for row in csv.DictReader(f, skipinitialspace=True):
            key = next(k for k in row if k.startswith("power.draw"))
            t = dt.datetime.strptime(row["timestamp"], "%Y/%m/%d %H:%M:%S.%f").astimezone(dt.timezone.utc)
            if lo <= t <= hi:
                watts.append(float(row[key].split()[0]))
    smi = sum(watts) / len(watts)
    total = s["total"]
    print(f"dlbench: {total['j_per_sample']:.4f} J/img ({total['mean_power_w']:.1f} W mean, "
          f"{total['methods']}); nvidia-smi: {smi * window / samples:.4f} J/img ({smi:.1f} W mean "
          f"of {len(watts)} samples over the window)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
