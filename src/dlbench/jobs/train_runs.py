"""What ``dlbench train`` runs: setups (batch size x GPU count), each trained once per seed to
the target, every run stored as it ends with its MLPerf log written and checked.

Nothing here prints; what happens goes to the callbacks it is given.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from dlbench.config import ConfigError
from dlbench.data import FolderDataset
from dlbench.jobs.stored_run import StoredRun
from dlbench.records.train import TrainConfig
from dlbench.store import Store
from dlbench.training import mlperf, recipe
from dlbench.training.loop import run_hyperparameters
from dlbench.training.models import canonical_name
from dlbench.training.runner import TorchrunRunner

#: The epoch cap of a benchmark the rules do not define.
DEFAULT_MAX_EPOCHS = 30


def train_setups(*, gpus: Sequence[int], batches: Sequence[int], seeds: int, seed: int,
                 model: str, loader: str | None, in_memory: bool,
                 **fields: Any) -> list[list[TrainConfig]]:
    """The setups (GPU count x batch size), each a list of one config per seed (``seed``,
    ``seed + 1``, ...). The loader defaults to the device-resident one for in-memory datasets."""
    if seeds < 1:
        raise ConfigError(f"seeds must be >= 1, got {seeds}", "seeds")
    loader = loader or ("gpu" if in_memory else "dataloader")
    name = canonical_name(model)
    return [[TrainConfig(model=name, batch_size=b, gpus=g, seed=seed + i, loader=loader,
                         **fields) for i in range(seeds)]
            for g in gpus for b in batches]


def plan_with_data(runner, *, target: float | None = None, max_epochs: int | None = None,
                   **kw: Any) -> tuple[list[list[TrainConfig]], Any]:
    """(setups, dataset): the dataset is read first, so a missing one stops here with its
    instructions, and whether it is held in memory picks the default loader.

    ``target`` and ``max_epochs`` default to the benchmark's rules (``training/rules``); a
    benchmark the rules do not define needs ``target`` (its epoch cap is then 30)."""
    probe = train_setups(in_memory=True, target=target or 1.0, max_epochs=max_epochs or 1,
                         **kw)[0][0]
    data = runner.dataset(probe)
    bench = recipe.find(data.name, probe.model)
    if target is None:
        if bench is None:
            raise ConfigError(f"target: the rules define no benchmark "
                              f"{recipe.benchmark_name(data.name, probe.model)} (they define "
                              f"{', '.join(sorted(recipe.benchmarks()))}); give "
                              "target=ACCURACY", "target")
        target = bench.target_accuracy
    if max_epochs is None:
        max_epochs = bench.max_epochs if bench is not None else DEFAULT_MAX_EPOCHS
    setups = train_setups(in_memory=not isinstance(data, FolderDataset), target=target,
                          max_epochs=max_epochs, **kw)
    for cfgs in setups:  # a schedule the rules cannot give stops here, not in a worker
        try:
            run_hyperparameters(cfgs[0], data.name)
        except recipe.RulesError as exc:
            raise ConfigError(str(exc)) from None
    return setups, data


def preflight(setups: Sequence[Sequence[TrainConfig]], device: str, mllog: bool) -> None:
    """What must hold before anything trains: GPUs to spare, precisions the device has.
    (Logs need no package: without mlperf-logging dlbench writes them and checks them itself.)"""

    cuda = device != "cpu" and torch.cuda.is_available()
    visible = torch.cuda.device_count() if cuda else None
    for cfgs in setups:
        c = cfgs[0]
        if visible is not None and c.gpus > visible:
            raise ConfigError(f"gpus {c.gpus}: only {visible} GPU(s) are visible", "gpus")
        if not cuda and c.precision in ("tf32", "fp16"):
            raise ConfigError(f"precision {c.precision} needs a CUDA GPU; on the CPU use "
                              "fp32 or bf16", "precision")


def log_dir_for(db: str | Path, log_dir: str | Path | None = None) -> Path:
    """Where the MLPerf logs go: ``log_dir``, else ``<db stem>-mllog/`` beside the store."""
    if log_dir:
        return Path(log_dir)
    db = Path(db)
    return db.with_name(db.stem + "-mllog")


def log_path(log_dir: Path, rec) -> Path:
    """One run's MLPerf log file: run, dataset, model, batch, GPUs, seed and result id."""
    c = rec.config
    stem = f"{rec.run_id}_{c.dataset}_{c.model}_b{c.batch_size}_x{c.gpus}_seed{c.seed}_{rec.id}"
    return log_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "-", stem) + ".log")


def run_train(setups: Sequence[Sequence[TrainConfig]], inline, db: str, command: str,
              env: dict, *, log_dir: Path, mllog: bool = True, check: bool = True,
              timeout_s: float = 3600.0, tag: str | None = None,
              on_start: Callable[[Sequence[TrainConfig]], None] | None = None,
              on_record: Callable[[Any], None] | None = None,
              on_epoch: Callable[[dict], None] | None = None) -> StoredRun:
    """Train every setup, each seed in turn: one GPU in this process (``inline``, an
    :class:`~dlbench.training.runner.InlineRunner`), more as one torchrun job per setup.

    Each run is stored before the next starts, its MLPerf log written to ``log_dir`` and, with
    ``check``, verified by MLPerf's compliance checker (the verdict kept in the record and beside
    the log). ``on_start`` sees the configs about to run (one, or a job's seeds). Ctrl-C ends the
    run as interrupted and keeps every finished run.
    """
    def keep(rec) -> None:
        # The log is written (and checked) with the run's id in its name, before it is stored.
        rec = rec.with_run(run.run_id)
        if rec.mllog:
            log_dir.mkdir(parents=True, exist_ok=True)
            path = log_path(log_dir, rec)
            path.write_text(rec.mllog)
            if check:
                verdict = mlperf.check_log(path)
                rec = replace(rec, compliance=verdict.to_dict())
                path.with_suffix(".check.txt").write_text(verdict.output + "\n")
        run.add(rec)  # committed before the next run starts

    with Store(db) as store:
        run = StoredRun(store, command, env, tag=tag, on_record=on_record)
        try:
            with run:
                for cfgs in setups:
                    if cfgs[0].gpus == 1:
                        for i, cfg in enumerate(cfgs):
                            if on_start is not None:
                                on_start([cfg])
                            keep(inline.run(cfg, env, measure_side=i == 0, on_epoch=on_epoch))
                        continue
                    if on_start is not None:
                        on_start(cfgs)
                    runner = TorchrunRunner(timeout_s=timeout_s, mllog=mllog)
                    try:
                        recs = runner.run_setup(list(cfgs), env)
                    except KeyboardInterrupt as exc:
                        for rec in getattr(exc, "finished", []):
                            keep(rec)
                        raise
                    for rec in recs:
                        keep(rec)
        except KeyboardInterrupt:
            pass  # the run is closed as interrupted; the finished runs are kept
    return run
