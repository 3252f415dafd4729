"""Record kind ``train``: one training run to a target accuracy (or its failure), MLPerf-style.

A :class:`TrainRecord` keeps the raw series of one run (seed): every epoch's training time,
evaluation time and accuracy, the loss of every iteration and the wall time at which it ended,
the MLPerf log the run wrote, and the throughput of the input pipeline alone and of the model on
synthetic data, measured beside it. Figures (time to train, epochs to converge, median epoch
time) are computed from those series. A run that diverged (NaN loss) or did not reach the target
within its epoch cap is a record too, with ``status="error"``: MLPerf counts it (see
:mod:`dlbench.measure.olympic`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from dlbench.config import BACKENDS, FRAMEWORKS, ConfigError, choice
from dlbench.measure.stats import percentile
from dlbench.records.base import Record, asdict, known_fields

LOADERS = ("gpu", "dataloader")
TRAIN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
TRAIN_OPTIMIZERS = ("sgd", "adamw")

#: ``error_type`` of a run that ended its epoch cap below the target.
NOT_CONVERGED = "not_converged"


@dataclass(frozen=True)
class TrainConfig:
    """One training run: a model on a dataset, to a target accuracy, at one batch size, GPU count
    and seed.

    Attributes:
        dataset: a name of :func:`dlbench.data.dataset_names` (``--dataset``).
        model: ``cnn10``, ``wrn28_10``, ``resnet18``... or any image model of ``dlbench models``
            (``--model``).
        batch_size: samples per step on one GPU (``-b``); the global batch is this times ``gpus``.
        gpus: data-parallel processes, one per GPU (DDP); on a machine without CUDA, gloo
            processes on the CPU (``--gpus``).
        target: evaluation accuracy (0..1) that ends the run (``--target``).
        max_epochs: epoch cap; a run still below the target then has failed (``--max-epochs``).
        seed: seed of the weights, the data order and augmentation (``--seed`` + run index).
        loader: ``gpu``: the whole dataset held on the device, batches gathered there;
            ``dataloader``: torch DataLoader with ``workers`` processes and pinned memory
            (``--loader``).
        workers: DataLoader worker processes per GPU (``--workers``).
        optimizer: ``sgd`` (Nesterov momentum 0.9) or ``adamw`` (``--optimizer``).
        lr: peak learning rate; None for the benchmark's rules at this global batch
            (``dlbench.training.recipe``), as are the next three when None.
        weight_decay: L2 penalty (SGD) or decoupled decay (AdamW) (``--weight-decay``).
        warmup_epochs: linear warm-up of the learning rate from 0 (``--warmup-epochs``).
        decay_epochs: the cosine decay reaches 0 at this epoch; 0 keeps the peak after the
            warm-up (``--decay-epochs``).
        precision: fp32 (no TF32), tf32, bf16 (autocast), fp16 (autocast + GradScaler).
        augment: random crop (4 px padding) and horizontal flip on the device (``--augment``).
        full_epochs: train all ``max_epochs`` even after the target (fixed-length runs, as the
            CIFAR-10 framework study's); time to train is still taken at the first evaluation
            that reached it.
        device: ``auto``, ``cpu`` or ``cuda``.
        data_dir: where the dataset was read from (``--data-dir``); not part of the identity.
        image_size: side of ImageFolder images (``--image-size``); None for the dataset's own.
        backend: ``auto`` (nccl on GPUs, gloo on the CPU), ``nccl`` or ``gloo``.
        throughput_steps: steps of the synthetic-data and input-pipeline measurements taken after
            the run (first seed of a setup only); 0 skips them.
        framework: ``torch`` or ``jax`` (``--framework``): the same model, data order,
            schedule and MLPerf log, trained by PyTorch or by JAX (one device).
    """

    dataset: str
    model: str
    batch_size: int
    target: float
    gpus: int = 1
    max_epochs: int = 30
    seed: int = 0
    loader: str = "gpu"
    workers: int = 4
    optimizer: str = "sgd"
    lr: float | None = None
    weight_decay: float | None = None
    warmup_epochs: float | None = None
    decay_epochs: float | None = None
    precision: str = "fp32"
    augment: bool = False
    full_epochs: bool = False
    device: str = "auto"
    data_dir: str | None = None
    image_size: int | None = None
    backend: str = "auto"
    throughput_steps: int = 50
    framework: str = "torch"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}", "batch_size")
        if self.gpus < 1:
            raise ConfigError(f"gpus must be >= 1, got {self.gpus}", "gpus")
        if not 0.0 < self.target <= 1.0:
            raise ConfigError(f"target is an accuracy in (0, 1], got {self.target}", "target")
        if self.max_epochs < 1:
            raise ConfigError(f"max_epochs must be >= 1, got {self.max_epochs}", "max_epochs")
        choice("loader", self.loader, LOADERS)
        choice("optimizer", self.optimizer, TRAIN_OPTIMIZERS)
        choice("precision", self.precision, TRAIN_PRECISIONS)
        choice("backend", self.backend, BACKENDS)
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}", "workers")
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}", "lr")
        for name in ("weight_decay", "warmup_epochs", "decay_epochs"):
            v = getattr(self, name)
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise ConfigError(f"{name} must be a finite number >= 0, got {v}", name)
        if self.throughput_steps < 0:
            raise ConfigError(f"throughput_steps must be >= 0, got {self.throughput_steps}",
                              "throughput_steps")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be auto, cpu or cuda, got {self.device!r}", "device")
        choice("framework", self.framework, FRAMEWORKS)
        if self.framework == "jax":
            self._check_jax()

    def _check_jax(self) -> None:
        # The JAX loop is one device with the dataset staged on it, no augmentation written.
        # Each field it refuses, with the value that was given.
        for name, value, bad in (("gpus", self.gpus, self.gpus > 1),
                                 ("loader", f'"{self.loader}"', self.loader != "gpu"),
                                 ("augment", True, self.augment),
                                 ("precision", f'"{self.precision}"', self.precision == "fp16")):
            if bad:
                raise ConfigError(f'{name}={value} with framework="jax": the JAX run is one '
                                  'device, the dataset held on it (loader="gpu"), no '
                                  "augmentation, fp32/tf32/bf16; drop it or use "
                                  'framework="torch"', name)

    # Not identity: where the files were, which device name was typed, and the side measurements.
    _NOT_IDENTITY = ("data_dir", "device", "throughput_steps")

    def key(self) -> str:
        ident = {k: v for k, v in self.to_dict().items() if k not in self._NOT_IDENTITY}
        if ident.get("framework") == "torch":  # the key of a run stored before the field
            del ident["framework"]
        # Runs stored before the rules are read with decay_epochs 0 (their constant rate after
        # the warm-up, see from_dict) and keep their keys; a new run's default (None: the
        # rules' decay) gets a key of its own.
        if ident.get("decay_epochs") == 0.0:
            del ident["decay_epochs"]
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def setup_key(self) -> str:
        """The key of every run of this setup whatever its seed: the runs MLPerf scores together."""
        return replace(self, seed=0).key()

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.gpus

    @property
    def label(self) -> str:
        parts = [f"{self.model}@{self.dataset}", f"b{self.batch_size}", f"x{self.gpus}",
                 self.precision, f"target={self.target:g}", f"seed={self.seed}"]
        if self.loader != "gpu":
            parts.append(f"{self.loader}({self.workers}w)")
        if self.optimizer != "sgd":
            parts.append(self.optimizer)
        if self.augment:
            parts.append("aug")
        if self.framework != "torch":
            parts.append(self.framework)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        known = known_fields(cls)
        d = dict(d)
        if "decay_epochs" not in d:
            # Stored before the rules: those runs kept the peak rate after the warm-up.
            d["decay_epochs"] = 0.0
        return cls(**{k: v for k, v in d.items() if k in known})


def rate(m: dict[str, Any] | None) -> float | None:
    """Samples per second of a side measurement: every rank's samples over the slowest rank's
    time (the ranks ran at the same time)."""
    if not m or not m.get("seconds"):
        return None
    return m["samples"] / m["seconds"]


#: ``env.jax`` key of a JAX training record whose every program was compiled during init, on
#: inputs placed as the timed run's are (:mod:`dlbench.frameworks.jax.train`).
JAX_COMPILED_IN_INIT = "compiled_in_init"


@dataclass(frozen=True, kw_only=True)
class TrainRecord(Record):
    """One training run to a target (or its failure), with every raw series.

    Times are seconds on the host clock, each ending at a synchronisation (the evaluation reads
    its accuracy, an epoch's last step is waited for), so queued GPU work is never left out.
    ``iter_time_s[i]`` is when iteration i ended, from the run's start (the x axis of loss against
    wall time).
    """

    config_type: ClassVar[type] = TrainConfig
    kind: ClassVar[str] = "train"

    world: int = 1
    backend: str | None = None
    device: str | None = None                      # e.g. cuda, cpu
    lr: float | None = None                        # the peak learning rate used
    hyperparameters: dict[str, Any] | None = None  # optimizer and schedule used, as logged
    samples_per_epoch: int = 0                     # trained per epoch, all ranks
    steps_per_epoch: int = 0
    init_s: float | None = None                    # init_start -> init_stop (model, loader)
    run_s: float | None = None                     # run_start -> run_stop
    time_to_train_s: float | None = None           # run_start -> end of the eval that reached it
    epochs_to_converge: int | None = None
    epoch_times_s: tuple[float, ...] = ()          # training pass of each epoch
    eval_times_s: tuple[float, ...] = ()
    eval_end_s: tuple[float, ...] = ()             # from run start, at each evaluation's end
    eval_accuracy: tuple[float, ...] = ()
    eval_loss: tuple[float, ...] = ()
    train_loss: tuple[float, ...] = ()             # mean over each epoch, all ranks
    iter_loss: tuple[float, ...] = ()              # rank 0, every iteration
    iter_time_s: tuple[float, ...] = ()            # rank 0, end of every iteration, from run start
    warm_up: dict[str, Any] | None = None          # init's warm-up: batch sizes, train and eval
    pipeline: dict[str, Any] | None = None         # the input pipeline alone: samples, seconds
    synthetic: dict[str, Any] | None = None        # the model on on-device random data
    memory: dict[str, int | None] = field(default_factory=dict)
    mllog: str | None = None                       # the MLPerf log of this run (rank 0)
    compliance: dict[str, Any] | None = None       # the compliance checker's verdict on it
    data_source: str | None = None                 # files the dataset was read from
    rank_hosts: tuple[str, ...] = ()
    launch_env: dict[str, str] = field(default_factory=dict)

    @property
    def converged(self) -> bool:
        return self.time_to_train_s is not None

    @property
    def epochs(self) -> int:
        return len(self.epoch_times_s)

    @property
    def first_epoch_s(self) -> float | None:
        return self.epoch_times_s[0] if self.epoch_times_s else None

    @property
    def median_epoch_s(self) -> float | None:
        """Median training time of epochs 2 onward (the CIFAR-10 study's steady-state figure); None
        with one epoch, whose time holds start-up costs."""
        rest = self.epoch_times_s[1:]
        return percentile(rest, 50) if rest else None

    @property
    def final_accuracy(self) -> float | None:
        return self.eval_accuracy[-1] if self.eval_accuracy else None

    def train_samples_per_s(self) -> float | None:
        """Real-data training throughput: samples of epochs 2+ over their time (epoch 1 alone when
        there is no other); evaluation excluded."""
        times = self.epoch_times_s[1:] or self.epoch_times_s
        total = math.fsum(times)
        return self.samples_per_epoch * len(times) / total if total > 0 else None

    def pipeline_samples_per_s(self) -> float | None:
        return rate(self.pipeline)

    def synthetic_samples_per_s(self) -> float | None:
        return rate(self.synthetic)

    def headline(self) -> float | None:
        """Time to train in seconds (converged runs only): the figure the store indexes."""
        return self.time_to_train_s if self.ok else None

    @property
    def autotune_in_first_epoch(self) -> bool:
        """A PyTorch run on a GPU stored before its init warm-up ran every batch shape
        (2026-11-27; the record then has no ``warm_up``), whose epoch ends on a partial batch:
        cuDNN autotuned that shape in the first epoch, which holds it (seconds on an H100)."""
        if not self.ok or getattr(self.config, "framework", "torch") != "torch" or \
                self.warm_up is not None or self.device != "cuda" or not self.steps_per_epoch:
            return False
        per_rank = self.samples_per_epoch // max(self.world, 1)
        return per_rank % self.config.batch_size != 0

    @property
    def compile_in_first_epoch(self) -> bool:
        """A JAX run stored before its loop compiled every program during init (2026-11-27):
        its step was compiled again in the first epoch, so its first epoch and its time to train
        hold that compile (seconds on an H100). Its record's ``env.jax`` lacks
        :data:`JAX_COMPILED_IN_INIT`; a failed run measured nothing either way."""
        return (self.ok and getattr(self.config, "framework", "torch") == "jax"
                and not ((self.env or {}).get("jax") or {}).get(JAX_COMPILED_IN_INIT))


def batch_sizes(samples: int, batch: int) -> tuple[int, ...]:
    """The sizes of the batches an epoch of ``samples`` (a rank's) yields at ``batch``: the full
    one and, where ``batch`` does not divide it, the last one. Each is a shape of its own for a
    compiler or cuDNN's autotuning, which both loops' init warms up (``warm_up``)."""
    last = samples % batch
    return (min(batch, samples),) + ((last,) if last and samples > batch else ())


# -- what a training loop books after each evaluated epoch and at the end of a run ---------------
# One copy for every framework's loop (PyTorch's training.loop, JAX's frameworks.jax.train): the
# run's raw fields, its MLPerf events and when it stops must not differ between frameworks.
def book_epoch(out: dict[str, Any], log: Any, cfg: Any, epoch: int, *, acc: float,
               eval_loss: float, train_loss: float, t0: float, t_epoch: float, t_end: float,
               t_eval: float, t_eval_end: float, peak_lr: float,
               on_epoch: Any = None) -> bool:
    """Book one evaluated epoch into ``out`` (the run's raw fields) and the MLPerf ``log``;
    True when the run stops here (the loss diverged, or the target was reached and
    ``cfg.full_epochs`` is off)."""
    out["eval_times_s"].append(t_eval_end - t_eval)
    out["eval_end_s"].append(t_eval_end - t0)
    out["eval_accuracy"].append(acc)
    out["eval_loss"].append(eval_loss)
    log.event("eval_accuracy", acc, metadata={"epoch_num": epoch}, t=t_eval_end)
    log.end("eval_stop", metadata={"epoch_num": epoch}, t=t_eval_end)
    if on_epoch is not None:
        on_epoch({"epoch": epoch, "accuracy": acc, "train_loss": train_loss,
                  "epoch_s": t_end - t_epoch, "elapsed_s": t_eval_end - t0})
    if not math.isfinite(train_loss):
        out.update(status="error", error_type="nan",
                   error=f"the training loss was {train_loss} in epoch {epoch}: the run "
                         f"diverged (peak lr {peak_lr:.3g}; try a smaller --lr or more "
                         "--warmup-epochs)")
        return True
    if acc >= cfg.target and out["time_to_train_s"] is None:
        out["time_to_train_s"] = t_eval_end - t0
        out["epochs_to_converge"] = epoch
        return not cfg.full_epochs
    return False


def book_run_end(out: dict[str, Any], log: Any, cfg: Any, t0: float, t_now: float,
                 t_last_eval: float | None) -> None:
    """Book the run's end: ``run_stop`` at the last evaluation when the target stopped the run
    (else now), the run's time, and a run that never reached the target as an error."""
    stopped_at_target = not cfg.full_epochs and out["time_to_train_s"] is not None
    t_stop = t_last_eval if stopped_at_target and t_last_eval is not None else t_now
    converged = out["time_to_train_s"] is not None and out["status"] == "ok"
    log.end("run_stop", metadata={"status": "success" if converged else "aborted",
                                  "epoch_num": len(out["epoch_times_s"])}, t=t_stop)
    out["run_s"] = t_stop - t0
    if out["status"] == "ok" and not converged:
        best = max(out["eval_accuracy"])
        out.update(status="error", error_type="not_converged",
                   error=f"accuracy {out['eval_accuracy'][-1]:.4f} after {cfg.max_epochs} "
                         f"epochs (best {best:.4f}) did not reach the target "
                         f"{cfg.target:g}; raise --max-epochs or lower --target")
