"""The parent side of ``dlbench train``: runs go in this process (one GPU) or as a torchrun job
(several), and every outcome, failures included, becomes a :class:`TrainRecord`.

One GPU: each run (seed) trains here, and the dataset read from disk is kept between runs. Several
GPUs: one torchrun job per setup (batch size x GPU count) trains that setup's seeds one after the
other, one process per GPU under DDP; rank 0 writes each finished run to a folder the moment it
ends, so a job that fails or is interrupted half-way still gives back the runs it finished.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dlbench.data import load_dataset
from dlbench.launch import tempdirs
from dlbench.launch.failures import (
    classify,
    describe,
    is_model_exit,
    model_exited,
    release_memory,
)
from dlbench.launch.lookup import worker_name
from dlbench.launch.torchrun import TorchrunLauncher, resolve_backend
from dlbench.records.base import ErrorType
from dlbench.records.train import TrainConfig, TrainRecord
from dlbench.training.loop import device_for, train_run
from dlbench.training.train_rank import run_rank

#: The worker each rank of a multi-GPU job runs (sent to the ranks by name:
#: :func:`dlbench.launch.lookup.worker_name`).
RANK_WORKER = run_rank

# Fields of a rank's result that go into the record as they are.
_SERIES = ("lr", "hyperparameters", "samples_per_epoch", "steps_per_epoch", "init_s", "run_s", "time_to_train_s",
           "epochs_to_converge", "epoch_times_s", "eval_times_s", "eval_end_s", "eval_accuracy",
           "eval_loss", "train_loss", "iter_loss", "iter_time_s", "memory", "mllog", "warm_up")


def merge_side(measurements: list[dict | None]) -> dict[str, Any] | None:
    """Side measurements of every rank (taken at the same time): total samples over the
    slowest rank's seconds."""
    ms = [m for m in measurements if m]
    if not ms:
        return None
    return {"samples": sum(m["samples"] for m in ms), "seconds": max(m["seconds"] for m in ms),
            "per_rank": ms}


def to_record(cfg: TrainConfig, env: dict, rank_results: list[dict[str, Any]],
              data_source: str | None, backend: str | None = None,
              launch_env: dict[str, str] | None = None) -> TrainRecord:
    """The record of one run from its ranks' raw results (rank 0 first)."""
    r0 = rank_results[0]
    kw = {k: r0.get(k) for k in _SERIES}
    for k, v in kw.items():
        if isinstance(v, list):
            kw[k] = tuple(v)
    kw["memory"] = kw["memory"] or {}
    return TrainRecord(
        config=cfg, env=env, status=r0["status"], error_type=r0["error_type"],
        error=r0["error"], world=r0["world"], backend=backend, device=r0["device"],
        pipeline=merge_side([r.get("pipeline") for r in rank_results]),
        synthetic=merge_side([r.get("synthetic") for r in rank_results]),
        data_source=data_source, rank_hosts=tuple(r["host"] for r in rank_results),
        launch_env=launch_env or {}, **kw)


def failure_record(cfg: TrainConfig, env: dict, error_type: str, error: str,
                   backend: str | None = None, launch_env: dict | None = None) -> TrainRecord:
    return TrainRecord(config=cfg, env=env, status="error", error_type=error_type, error=error,
                       world=cfg.gpus, backend=backend, launch_env=launch_env or {})


@dataclass
class InlineRunner:
    """Runs of one process, in this process; the dataset is read once per (name, folder)."""

    mllog: bool = True
    _data: dict[tuple, Any] = field(default_factory=dict)

    def dataset(self, cfg: TrainConfig):
        key = (cfg.dataset, cfg.data_dir, cfg.image_size)
        if key not in self._data:
            self._data[key] = load_dataset(cfg.dataset, cfg.data_dir, cfg.image_size)
        return self._data[key]

    def run(self, cfg: TrainConfig, env: dict, measure_side: bool = True,
            on_epoch: Callable[[dict], None] | None = None) -> TrainRecord:
        data = self.dataset(cfg)
        try:
            device = device_for(cfg)
            res = train_run(cfg, data, device, mllog=self.mllog, measure_side=measure_side,
                            on_epoch=on_epoch)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the run's failure is a record; the sweep goes on
            release_memory()
            return failure_record(cfg, env, classify(exc), describe(exc))
        except BaseException as exc:
            if not is_model_exit(exc):
                raise
            # the model's code called sys.exit: a failed run, never dlbench's silent end
            release_memory()
            return failure_record(cfg, env, ErrorType.EXCEPTION, describe(model_exited(exc)))
        return to_record(cfg, env, [res], data.source)


class TorchrunRunner:
    """One torchrun job per setup: ``cfg.gpus`` processes, every seed of the setup in turn."""

    def __init__(self, timeout_s: float = 3600.0, pg_timeout_s: float = 300.0,
                 mllog: bool = True) -> None:
        self.launcher = TorchrunLauncher(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s)
        self.mllog = mllog

    def run_setup(self, cfgs: list[TrainConfig], env: dict, measure_side: bool = True
                  ) -> list[TrainRecord]:
        backend = resolve_backend(cfgs[0].backend, cfgs[0].device)
        results_dir = Path(tempfile.mkdtemp(prefix="dlbench-train-", dir=tempdirs.root()))
        job = {"worker": worker_name(RANK_WORKER), "backend": backend,
               "configs": [c.to_dict() for c in cfgs],
               "results_dir": str(results_dir), "mllog": self.mllog,
               "measure_side": measure_side}
        try:
            try:
                out = self.launcher.launch(job, cfgs[0].gpus)
            except KeyboardInterrupt as exc:
                # Runs that finished before Ctrl-C are kept; the caller stores them.
                exc.finished = self._collect(cfgs, env, results_dir, backend, {})  # type: ignore[attr-defined]
                raise
            records = self._collect(cfgs, env, results_dir, backend, out.launch_env)
            if len(records) < len(cfgs):
                rank, kind, msg = out.first_failure()
                where = f"rank {rank}: " if rank is not None else ""
                records += [failure_record(c, env, kind or ErrorType.EXCEPTION, where + msg,
                                           backend, out.launch_env)
                            for c in cfgs[len(records):]]
            return records
        finally:
            shutil.rmtree(results_dir, ignore_errors=True)

    def _collect(self, cfgs: list[TrainConfig], env: dict, results_dir: Path, backend: str,
                 launch_env: dict) -> list[TrainRecord]:
        """Records of the runs whose every rank wrote its result, in run order."""
        records = []
        for i, cfg in enumerate(cfgs):
            files = sorted(results_dir.glob(f"run{i}.rank*.json"),
                           key=lambda p: int(p.stem.split("rank")[1]))
            if len(files) < cfg.gpus:
                break
            ranks = [json.loads(p.read_text()) for p in files]
            records.append(to_record(cfg, env, ranks, ranks[0].get("data_source"), backend,
                                     launch_env))
        return records
