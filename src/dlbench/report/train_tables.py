"""Tables of training runs to a target (record kind ``train``): pure functions, no I/O.

``ttt_table``: MLPerf's view. Per setup (model, dataset, batch, GPUs, precision, loader,
target): each seed's time to train and epochs, the olympic mean with MLPerf's failure rules, and
the throughput figures that do not depend on the seed (the point of Dell's 2019 MLPerf v0.5
study on T4 and V100, where epochs to converge varied with the seed): real-data training, the
input pipeline alone, the model on synthetic data.

``epoch_table``: the view of the 2019 PyTorch vs Keras CIFAR-10 study on 2x RTX 2080 Ti. Per GPU
count and batch size: first-epoch time, median epoch time from epoch 2, total time and final
accuracy (medians over the setup's seeds).
"""

from __future__ import annotations

from typing import Sequence

from dlbench.measure.olympic import olympic_mean
from dlbench.measure.stats import mean, percentile
from dlbench.report.table import Table, fmt_num


def _setup(r) -> tuple:
    c = r.config
    return (c.model, c.dataset, c.precision, c.loader, c.optimizer, c.target, c.gpus,
            c.batch_size)


def _groups(records: Sequence) -> dict[tuple, list]:
    out: dict[tuple, list] = {}
    for r in records:
        if r.kind == "train":
            out.setdefault(_setup(r), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][:6], kv[0][6], kv[0][7])))


def _median(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return percentile(vals, 50) if vals else None


def _first(xs: Sequence[float | None]) -> float | None:
    return next((x for x in xs if x is not None), None)


def fmt_hms(seconds: float | None) -> str:
    """h:mm:ss, as the PyTorch vs Keras CIFAR-10 study's total-time column; tenths below a
    minute."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _seed_cell(r) -> str:
    if r.ok:
        return f"{r.time_to_train_s:.2f}"
    return "NaN" if r.error_type == "nan" else ("cap" if r.error_type == "not_converged"
                                                else "err")


def ttt_table(records: Sequence, title: str = "Time to train (MLPerf-style)") -> Table:
    rows = []
    for key, recs in _groups(records).items():
        model, dataset, precision, loader, optimizer, target, gpus, batch = key
        recs = sorted(recs, key=lambda r: r.config.seed)
        # Errors other than a run that did not converge (a crash, an OOM) are not MLPerf
        # failures of convergence, but they are not successes either: they count as failed.
        score = olympic_mean([r.time_to_train_s if r.ok else None for r in recs])
        if score.valid:
            olympic = fmt_num(score.mean_s)
        elif score.runs < 3 and score.failures <= 1:
            olympic = "-"
        else:
            olympic = "invalid"
        checked = [r.compliance["passed"] for r in recs if r.compliance is not None]
        # MLPerf's own checker ran only where mlperf-logging was installed; a verdict of
        # dlbench's checker alone is said as such, never passed off as MLPerf's
        # (its exit code is stored where it ran, in records older than the checkers' names too)
        mlperf_ran = all("mlperf_logging" in (r.compliance.get("checkers") or ())
                         or r.compliance.get("returncode") is not None
                         for r in recs if r.compliance is not None)
        rows.append((
            f"{model}@{dataset}", str(batch), str(gpus), str(batch * gpus), precision, loader,
            f"{target:g}", " / ".join(_seed_cell(r) for r in recs),
            " / ".join(str(r.epochs_to_converge) if r.ok else "-" for r in recs),
            olympic, f"{score.failures}/{score.runs}",
            fmt_num(_median([r.train_samples_per_s() for r in recs if r.epoch_times_s])),
            fmt_num(_first([r.pipeline_samples_per_s() for r in recs])),
            fmt_num(_first([r.synthetic_samples_per_s() for r in recs])),
            "-" if not checked else f"{sum(checked)}/{len(checked)}"
            + ("" if mlperf_ran else " (dlbench's checker only)")))
    notes = (
        "time to train: seconds from run start (after init) to the end of the evaluation that "
        "first reached the target, per seed in seed order; 'cap' = target not reached within "
        "--max-epochs, 'NaN' = diverged, 'err' = the run failed.",
        "olympic: mean time to train with the fastest and slowest runs dropped; one failed run "
        "counts as the slowest, two or more make the result invalid (MLPerf); needs >= 3 runs.",
        "train samples/s: real data, epochs 2+ (median over seeds); pipeline: the input "
        "pipeline alone (load, copy, normalise, no model); synthetic: the same model and "
        "optimizer on one on-device random batch. All ranks' samples over the slowest rank's "
        "time.",
        "MLPerf logs: runs whose log passes MLPerf's compliance checker with dlbench's rules "
        "(a failed run's log says 'aborted' and does not pass); '(dlbench's checker only)': "
        "mlperf-logging was not installed, so only dlbench's own rules checker judged the logs.")
    return Table(title, ("model@dataset", "batch/GPU", "GPUs", "global batch", "precision",
                         "loader", "target", "time to train per seed (s)", "epochs per seed",
                         "olympic (s)", "failed", "train samples/s", "pipeline samples/s",
                         "synthetic samples/s", "MLPerf logs"), tuple(rows), notes)


def epoch_table(records: Sequence, title: str = "Epoch times over batch sizes and GPUs") -> Table:
    rows = []
    for key, recs in _groups(records).items():
        model, dataset, precision, loader, optimizer, target, gpus, batch = key
        timed = [r for r in recs if r.epoch_times_s]
        if not timed:
            continue
        accs = [r.final_accuracy for r in timed if r.final_accuracy is not None]
        rows.append((
            f"{model}@{dataset}", precision, str(gpus), str(batch), str(len(timed)),
            fmt_num(_median([r.first_epoch_s for r in timed])),
            fmt_num(_median([r.median_epoch_s for r in timed])),
            fmt_hms(_median([r.run_s for r in timed])),
            f"{_median([float(r.epochs) for r in timed]):g}",
            f"{mean(accs):.4f}" if accs else "-",
            fmt_num(_median([r.time_to_train_s for r in timed]))))
    notes = ("epoch: the training pass alone (evaluation apart); the 1st epoch holds what "
             "start-up init's warm-up left (DataLoader workers starting, the allocator growing); "
             "the median from epoch 2 is the steady state; "
             "total: run start to run stop, evaluations included. Medians over the seeds, "
             "accuracy their mean.",)
    return Table(title, ("model@dataset", "precision", "GPUs", "batch/GPU", "runs",
                         "1st epoch (s)", "median epoch 2+ (s)", "total", "epochs",
                         "final accuracy", "time to train (s)"), tuple(rows), notes)


def train_tables(records: Sequence) -> list[Table]:
    """The tables of a set of train records (empty when there are none)."""
    recs = [r for r in records if r.kind == "train"]
    if not recs:
        return []
    return [ttt_table(recs), epoch_table(recs)]
