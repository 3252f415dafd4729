"""Training runs as CSV, one row per run (seed), with the figures of the tables.

``dlbench results export`` writes the full records (every series, the MLPerf logs) as JSON; this
is the flat view for a spreadsheet:  python -m dlbench.report.train_export DB OUT.csv [--tag T]
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from typing import Any, Sequence

from dlbench.store import Store

COLUMNS = (
    "id", "run_id", "created_at", "dataset", "model", "batch_per_gpu", "gpus", "global_batch",
    "precision", "loader", "workers", "optimizer", "lr", "target", "seed", "max_epochs", "status",
    "error_type", "converged", "time_to_train_s", "epochs_to_converge", "epochs", "run_s",
    "init_s", "first_epoch_s", "median_epoch_s", "final_accuracy", "best_accuracy",
    "train_samples_per_s", "pipeline_samples_per_s", "synthetic_samples_per_s",
    "mlperf_log_passes", "device", "gpu", "torch", "host", "error")


def row(r) -> dict[str, Any]:
    c, env = r.config, r.env or {}
    gpus = env.get("gpus") or []
    return {
        "id": r.id, "run_id": r.run_id, "created_at": r.created_at, "dataset": c.dataset,
        "model": c.model, "batch_per_gpu": c.batch_size, "gpus": c.gpus,
        "global_batch": c.global_batch, "precision": c.precision, "loader": c.loader,
        "workers": c.workers if c.loader == "dataloader" else "", "optimizer": c.optimizer,
        "lr": r.lr, "target": c.target, "seed": c.seed, "max_epochs": c.max_epochs,
        "status": r.status, "error_type": r.error_type or "", "converged": r.converged,
        "time_to_train_s": r.time_to_train_s, "epochs_to_converge": r.epochs_to_converge,
        "epochs": r.epochs, "run_s": r.run_s, "init_s": r.init_s,
        "first_epoch_s": r.first_epoch_s, "median_epoch_s": r.median_epoch_s,
        "final_accuracy": r.final_accuracy,
        "best_accuracy": max(r.eval_accuracy) if r.eval_accuracy else None,
        "train_samples_per_s": r.train_samples_per_s() if r.epoch_times_s else None,
        "pipeline_samples_per_s": r.pipeline_samples_per_s(),
        "synthetic_samples_per_s": r.synthetic_samples_per_s(),
        "mlperf_log_passes": "" if r.compliance is None else r.compliance["passed"],
        "device": r.device or "", "gpu": gpus[0].get("name") if gpus else "",
        "torch": (env.get("packages") or {}).get("torch"), "host": env.get("hostname"),
        "error": (r.error or "").splitlines()[0] if r.error else ""}


def to_csv(records: Sequence) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in records:
        if r.kind == "train":
            w.writerow({k: "" if v is None else v for k, v in row(r).items()})
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlbench.report.train_export",
                                 description="Training runs of a dlbench store as CSV.")
    ap.add_argument("db")
    ap.add_argument("output", help="CSV file to write ('-' for stdout)")
    ap.add_argument("--tag", help="only runs with this tag")
    args = ap.parse_args(argv)
    with Store(args.db) as store:
        text = to_csv(store.results(kind="train", tag=args.tag))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
