"""One training run to a target accuracy: the loop, its clock and its MLPerf log.

The clock starts at ``run_start``, after init (model, optimizer, loaders, the dataset staged on
the device), and time to train is read at the end of the evaluation that first reaches the
target (MLPerf's definition). Inside an epoch nothing synchronises: the loss of every step stays
on the device and a CUDA event marks every step's end; both are read once, when the epoch ends.
The evaluation then synchronises, since its accuracy decides whether the run goes on.

The epoch is not a measured window (:mod:`dlbench.measure.window`): it is one pass over the data,
every batch once, with no warm-up set apart (MLPerf's clock counts the first epoch too), no
stopping rule and no time cap to overrun, and the evaluation drains its queue when it ends. The
synthetic-data side measurement after the run is a window: a fixed number of steps.

Measurement code prints nothing and writes no files: the run returns a dict of raw series, and
``on_epoch`` (progress) is the caller's.
"""

from __future__ import annotations

import copy
import math
import socket
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from dlbench.data.base import ArrayDataset, FolderDataset
from dlbench.measure.memory import peak_memory, reset_peak_memory
from dlbench.measure.timer import make_timer, synchronize
from dlbench.measure.window import MeasuredWindow
from dlbench.records.train import TrainConfig, book_epoch, book_run_end
from dlbench.training import mlperf, recipe
from dlbench.training.models import build_model
from dlbench.training.pipeline import Normalizer, make_loaders, measure_pipeline
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.step import update
from dlbench.workloads.throughput import autocast_factory, precision_flags

# Evaluation batches: large, as evaluation keeps no activations.
EVAL_BATCH = 1024

# Steps before the synthetic-data window (the first one included): cuDNN autotuning and
# allocator warm-up.
SYNTHETIC_WARMUP = 5


def device_for(cfg: TrainConfig, local_rank: int = 0) -> torch.device:
    """The device of a run: a CUDA GPU unless ``--device cpu`` or no GPU is visible."""
    if cfg.device == "cpu" or not torch.cuda.is_available():
        if cfg.device.startswith("cuda"):
            raise UnsupportedError("--device cuda: no CUDA GPU is visible; use --device cpu")
        return torch.device("cpu")
    index = int(cfg.device.split(":")[1]) if ":" in cfg.device else local_rank
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def run_hyperparameters(cfg: TrainConfig, dataset: str | None = None) -> recipe.Hyperparameters:
    """The optimizer and schedule of a config: the benchmark's rules at its global batch
    (:mod:`dlbench.training.recipe`), with the config's own ``lr``, ``warmup_epochs``,
    ``decay_epochs`` and ``weight_decay`` where it sets them."""
    return recipe.hyperparameters(
        dataset or cfg.dataset, cfg.model, cfg.optimizer, cfg.global_batch, cfg.max_epochs,
        lr=cfg.lr, warmup_epochs=cfg.warmup_epochs, decay_epochs=cfg.decay_epochs,
        weight_decay=cfg.weight_decay)


def default_lr(cfg: TrainConfig) -> float:
    """The peak learning rate of a config: ``--lr``, or the rules' at its global batch."""
    return run_hyperparameters(cfg).peak_lr


def make_optimizer(hp: recipe.Hyperparameters, params, lr: float) -> torch.optim.Optimizer:
    if hp.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=hp.momentum, nesterov=hp.nesterov,
                               weight_decay=hp.weight_decay)
    return torch.optim.AdamW(params, lr=lr, betas=(hp.momentum, 0.999),
                             weight_decay=hp.weight_decay)


def _all_sum(values: list[float], device: torch.device, world: int) -> list[float]:
    """Sum of ``values`` over ranks (the numbers every rank must agree on: accuracy, loss)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(t)
    return t.tolist()  # note: a sync point


def train_run(cfg: TrainConfig, data: ArrayDataset | FolderDataset, device: torch.device,
              rank: int = 0, world: int = 1, mllog: bool = True, measure_side: bool = True,
              on_epoch: Callable[[dict[str, Any]], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Train ``cfg`` to its target (or its epoch cap) on this rank; returns the raw results.

    With ``world > 1`` the process group must be initialised (one process per device); the model
    is wrapped in DistributedDataParallel and every rank returns the same accuracies.
    """
    log = mlperf.make_log(mllog, rank, clock)
    t_init = clock()
    log.start("init_start", t=t_init)
    hp = run_hyperparameters(cfg, data.name)
    lr = hp.peak_lr
    _log_config(log, cfg, data, world, hp, device)

    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    model = build_model(cfg.model, data.channels, data.num_classes, data.size).to(device)
    net = model
    if world > 1:
        net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(hp, [p for p in model.parameters() if p.requires_grad], lr)
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    train_loader, eval_loader = make_loaders(
        data, cfg.loader, cfg.batch_size, max(EVAL_BATCH, cfg.batch_size), device, cfg.workers,
        rank, world, cfg.seed)
    normalize = Normalizer(data.mean, data.std, device, cfg.augment, seed=cfg.seed * 100 + rank)
    steps = len(train_loader)
    samples_per_epoch = train_loader.samples_per_epoch
    autocast = autocast_factory(cfg.precision, device)
    with precision_flags(cfg.precision, device):
        _warm_up(model, data, cfg, hp, device, autocast, train_loader.batch_sizes,
                 eval_loader.batch_sizes)
    reset_peak_memory(device)
    synchronize(device)

    out: dict[str, Any] = {
        "rank": rank, "world": world, "host": socket.gethostname(), "device": device.type,
        "lr": lr, "hyperparameters": hp.to_dict(), "samples_per_epoch": samples_per_epoch, "steps_per_epoch": steps,
        "epoch_times_s": [], "eval_times_s": [], "eval_end_s": [], "eval_accuracy": [],
        "eval_loss": [], "train_loss": [], "iter_loss": [], "iter_time_s": [],
        "time_to_train_s": None, "epochs_to_converge": None, "status": "ok",
        "error_type": None, "error": None, "pipeline": None, "synthetic": None,
        "warm_up": {"train": list(train_loader.batch_sizes), "eval": list(eval_loader.batch_sizes)}}

    with precision_flags(cfg.precision, device):
        t0 = clock()
        out["init_s"] = t0 - t_init
        log.end("init_stop", t=t0)
        log.start("run_start", t=t0)
        global_step = 0
        t_eval_end = None
        for epoch in range(1, cfg.max_epochs + 1):
            net.train()
            t_epoch = clock()
            log.start("epoch_start", metadata={"epoch_num": epoch}, t=t_epoch)
            losses = torch.zeros(steps, device=device)
            timer = make_timer(device, clock)
            timer.start()
            n = 0
            for x, y in train_loader.epoch(epoch):
                step_lr = recipe.lr_at(hp, global_step, steps)  # a host-side float: no sync
                for g in opt.param_groups:
                    g["lr"] = step_lr
                with autocast():
                    loss = F.cross_entropy(net(normalize(x)).float(), y)
                update(loss, opt, scaler)
                losses[n] = loss.detach()
                timer.lap()
                n += 1
                global_step += 1
            step_times = timer.finish()  # note: the epoch's one sync point
            t_end = clock()
            out["epoch_times_s"].append(t_end - t_epoch)
            start_rel = t_epoch - t0
            out["iter_time_s"] += list(start_rel + t for t in _cumsum(step_times))
            out["iter_loss"] += losses[:n].tolist()
            loss_sum, loss_n = _all_sum([float(losses[:n].double().sum()), n], device, world)
            train_loss = loss_sum / max(loss_n, 1)
            out["train_loss"].append(train_loss)
            log.end("epoch_stop", metadata={"epoch_num": epoch,
                                             "samples_count": samples_per_epoch}, t=t_end)
            log.event("train_loss", train_loss, metadata={"epoch_num": epoch}, t=t_end)

            t_eval = clock()
            log.start("eval_start", metadata={"epoch_num": epoch}, t=t_eval)
            acc, eval_loss = _evaluate(model, eval_loader, normalize, autocast, device, world)
            t_eval_end = clock()
            if book_epoch(out, log, cfg, epoch, acc=acc, eval_loss=eval_loss,
                          train_loss=train_loss, t0=t0, t_epoch=t_epoch, t_end=t_end,
                          t_eval=t_eval, t_eval_end=t_eval_end, peak_lr=lr, on_epoch=on_epoch):
                break
        book_run_end(out, log, cfg, t0, clock(), t_eval_end)
        out["memory"] = peak_memory(device)

        if measure_side and cfg.throughput_steps > 0:
            # After run_stop, so the side measurements never touch the time to train.
            out["pipeline"] = measure_pipeline(train_loader, normalize, cfg.throughput_steps,
                                               device, cfg.max_epochs + 1, clock)
            out["synthetic"] = _synthetic(net, opt, scaler, autocast, data, cfg, device, clock)
    out["mllog"] = log.text()
    return out


def _warm_up(model: torch.nn.Module, data, cfg: TrainConfig, hp: recipe.Hyperparameters,
             device: torch.device, autocast, train_sizes: tuple[int, ...],
             eval_sizes: tuple[int, ...]) -> None:
    """Two training steps at the full batch, one at the epoch's last partial batch, and one
    evaluation batch of each size the evaluation uses, on a throwaway copy of the model with
    random data (never the training set), during init: cuDNN autotuning (for every batch shape
    the run meets: a shape seen first in the run was autotuned in its first epoch), lazy
    initialisation and the libraries' first-use imports happen here, so that neither the first
    epoch nor a process's first seed holds them. MLPerf permits warm-up on synthetic data in
    init."""
    m = copy.deepcopy(model)
    opt = make_optimizer(hp, [p for p in m.parameters() if p.requires_grad], 1e-12)
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
    g = torch.Generator(device=device).manual_seed(12345)  # leaves the global RNG untouched
    shape = (data.channels, data.size, data.size)
    m.train()
    for n in (train_sizes[0], *train_sizes):  # the full batch twice, then the last
        x = torch.randn(n, *shape, device=device, generator=g)
        y = torch.randint(0, data.num_classes, (n,), device=device, generator=g)
        with autocast():
            loss = F.cross_entropy(m(x).float(), y)
        update(loss, opt, scaler)
    m.eval()
    with torch.no_grad(), autocast():
        for n in eval_sizes:
            m(torch.randn(n, *shape, device=device, generator=g))
    synchronize(device)
    del m, opt


def _cumsum(xs: list[float]) -> list[float]:
    out, acc = [], 0.0
    for x in xs:
        acc += x
        out.append(acc)
    return out


def _evaluate(model: torch.nn.Module, loader, normalize: Normalizer, autocast, device,
              world: int) -> tuple[float, float]:
    """Accuracy and mean loss over the whole evaluation set (each rank a share, summed)."""
    model.eval()  # the plain module: no DDP hooks; BN uses the running statistics
    correct = torch.zeros((), dtype=torch.float64, device=device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    with torch.no_grad():
        for x, y in loader.epoch(0):
            with autocast():
                logits = model(normalize(x, train=False)).float()
            correct += (logits.argmax(1) == y).sum()
            loss_sum += F.cross_entropy(logits, y, reduction="sum").double()
            count += len(y)
    c, s, n = _all_sum([float(correct), float(loss_sum), count], device, world)
    return c / n, s / n


def _synthetic(net, opt, scaler, autocast, data, cfg: TrainConfig, device: torch.device,
               clock) -> dict[str, Any]:
    """The same model and optimizer on one batch of random data kept on the device: the speed
    the input pipeline is measured against (tf_cnn_benchmarks' synthetic mode)."""
    g = torch.Generator(device=device).manual_seed(cfg.seed + 7)
    x = torch.randn(cfg.batch_size, data.channels, data.size, data.size, device=device,
                    generator=g)
    y = torch.randint(0, data.num_classes, (cfg.batch_size,), device=device, generator=g)
    net.train()

    def step() -> None:
        with autocast():
            loss = F.cross_entropy(net(x).float(), y)
        update(loss, opt, scaler)

    # A fixed count of steps, the same on every rank of a DDP job: nothing to agree on. The
    # window bounds the launch queue all the same, as everywhere a step is timed.
    window = MeasuredWindow(device, clock=clock)
    window.first_step(step)
    window.warm_up(step, SYNTHETIC_WARMUP - 1)
    window.run(step, cfg.throughput_steps)
    times = window.step_times_s
    return {"samples": cfg.batch_size * len(times), "seconds": math.fsum(times),
            "steps": len(times)}


def _log_config(log, cfg: TrainConfig, data, world: int, hp: recipe.Hyperparameters,
                device: torch.device) -> None:
    log.event("submission_benchmark", recipe.benchmark_name(data.name, cfg.model))
    log.event("submission_org", "dlbench")
    log.event("submission_division", "closed")
    log.event("submission_status", "research")
    log.event("submission_platform", _platform(device, world))
    log.event("seed", cfg.seed)
    log.event("global_batch_size", cfg.global_batch)
    log.event("train_samples", data.train_len)
    log.event("eval_samples", data.eval_len)
    log.event("target_accuracy", cfg.target)
    # The hyperparameters, as the rules define them per global batch: the checker compares each.
    for key, value in hp.log_items(cfg.precision):
        log.event(key, value)
    log.event("number_of_nodes", 1)
    log.event("accelerators_per_node", world)
    log.event("loader", cfg.loader)


def _platform(device: torch.device, world: int) -> str:
    if device.type == "cuda":
        return f"{world}x{torch.cuda.get_device_name(device)}"
    return f"{world}xCPU"
