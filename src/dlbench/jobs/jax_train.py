"""``dlbench train --framework jax``: the JAX loop (:mod:`dlbench.frameworks.jax.train`) fed the
PyTorch run's rules, schedule, data order and MLPerf log, so one command compares the two.

PyTorch's :class:`dlbench.training.runner.InlineRunner` with JAX's ``run``: runs of one device
in this process, each outcome (failures too) a :class:`TrainRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from dlbench.launch.failures import classify, describe
from dlbench.records.train import JAX_COMPILED_IN_INIT, TrainConfig, TrainRecord
from dlbench.training import loop, mlperf, recipe
from dlbench.training.pipeline import epoch_permutation
from dlbench.training.runner import InlineRunner, failure_record, to_record


@dataclass
class JaxTrainRunner(InlineRunner):
    """One-device JAX runs in this process; the dataset is read once per (name, folder), as
    PyTorch's :class:`InlineRunner` reads it."""

    def run(self, cfg: TrainConfig, env: dict, measure_side: bool = True,
            on_epoch: Callable[[dict], None] | None = None) -> TrainRecord:
        data = self.dataset(cfg)
        try:
            res = run_one(cfg, data, mllog=self.mllog, measure_side=measure_side,
                          on_epoch=on_epoch)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the run's failure is a record; the sweep goes on
            return failure_record(cfg, env, classify(exc), describe(exc))
        from dlbench.frameworks.jax import versions  # heavy: jax
        jax_env = {**versions(), JAX_COMPILED_IN_INIT: True}  # every program compiled in init
        return to_record(cfg, {**env, "jax": jax_env}, [res], data.source)


def run_one(cfg: TrainConfig, data, mllog: bool = True, measure_side: bool = True,
            on_epoch: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """One JAX run's raw results, with the PyTorch loop's hyperparameters and log events."""
    import torch  # heavy: the log's platform line names the GPU as PyTorch's does

    from dlbench.frameworks.jax.train import train_run  # heavy: jax
    hp = loop.run_hyperparameters(cfg, data.name)
    log = mlperf.make_log(mllog, 0)
    gpu = cfg.device != "cpu" and torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    return train_run(cfg, data, hp=hp, lr_at=partial(recipe.lr_at, hp), log=log,
                     log_config=lambda: loop._log_config(log, cfg, data, 1, hp, device),
                     order=lambda n, seed, epoch: epoch_permutation(n, seed, epoch).numpy(),
                     eval_batch=max(loop.EVAL_BATCH, cfg.batch_size),
                     synthetic_warmup=loop.SYNTHETIC_WARMUP, measure_side=measure_side,
                     on_epoch=on_epoch)
