"""One emulated host's part of ``dlbench net``: train with ddp or ps, count its interface's bytes.

Runs inside a rank process that :mod:`dlbench.netemu.launch` started in the host's network
namespace, with the gloo process group initialised over the emulated link. The strategies are
those of ``dlbench scale`` (:func:`dlbench.workloads.scaling.wrap_strategy`: DDP, or the
parameter server of :mod:`dlbench.workloads.ps`). One process measures several *windows*, one
per (link, strategy), so that start-up (importing torch, building DDP) is paid once; between
windows the parent reshapes the link while every rank waits (``between``). Each window starts
from the same initial weights (a fresh module loaded with them, a fresh wrapper and optimizer),
so its loss curve is comparable with every other window's.

Recorded per rank:

1. once, a compute-only calibration: the same model, batch and optimizer without any
   communication, a few steps timed on every rank at once (so under the same sharing of the
   machine's cores): the compute time the what-if model starts from;
2. per window, a fixed count of measured steps (every link and strategy trains the same
   iterations), each with its time, the loss and the time since the window began;
3. per window, the interface's byte counters (``/sys/class/net/DEV/statistics``, the
   namespace's own view) read just before and just after it.

On the CPU a step is synchronous (no device queue), so reading the loss each step costs nothing
but the read. Prints nothing and writes nothing: returns a dict of raw results.
"""

from __future__ import annotations

import copy
import itertools
import socket
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from dlbench.measure.window import MeasuredWindow
from dlbench.models import get_model
from dlbench.records.net import NetConfig
from dlbench.records.scaling import ScalingConfig
from dlbench.workloads.ps import assign_shards
from dlbench.workloads.scaling import wrap_strategy
from dlbench.workloads.throughput import build_step, precision_flags

#: The calibration stops after this many seconds even if its steps are not done.
CALIBRATION_MAX_S = 20.0


def read_counters(dev: str, root: str = "/sys/class/net") -> tuple[int, int]:
    """(tx_bytes, rx_bytes) of ``dev`` as this process's network namespace sees it."""
    base = Path(root) / dev / "statistics"
    return int((base / "tx_bytes").read_text()), int((base / "rx_bytes").read_text())


def measure_host(windows: Sequence[NetConfig], dev: str, compute_steps: int = 5,
                 between: Callable[[int], None] = lambda k: None,
                 on_window: Callable[[int, dict], None] = lambda k, d: None,
                 clock: Callable[[], float] = time.perf_counter,
                 counters: Callable[[str], tuple[int, int]] = read_counters) -> dict[str, Any]:
    """This rank's raw results: the compute-only times, then one dict per window.

    ``between(k)`` is called on every rank, with every rank idle (after a barrier), before
    window k: the parent shapes the link for it meanwhile. ``on_window(k, result)`` receives
    each window's results as soon as they exist (so a later failure loses none of them).
    """
    base = windows[0].base
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    spec = get_model(base.model)
    size = base.input_size or spec.input_size
    torch.manual_seed(base.seed)   # the same initial weights on every host
    gen = torch.Generator().manual_seed(base.seed * 1000 + rank)   # each host its own data
    out: dict[str, Any] = {"rank": rank, "world": world, "host": socket.gethostname(),
                           "dev": dev, "unit": spec.unit, "windows": []}
    with precision_flags(base.precision, device, base.autotune):
        t = clock()
        initial = spec.build(size).to(device)
        x, y = spec.make_batch(base.batch_size, device, size, generator=gen)
        out["build_s"] = clock() - t
        params = [p for p in initial.parameters() if p.requires_grad]
        sizes = [p.numel() * p.element_size() for p in params]
        out.update(param_count=sum(p.numel() for p in params), grad_bytes=sum(sizes))

        # 1. Compute alone, on a copy (its optimizer state must not touch anything else).
        solo = copy.deepcopy(initial).train(True)
        solo_step = build_step(base, spec, solo, x, y, device)
        solo_step()                      # first step: allocations, kernel selection
        dist.barrier()                   # every rank computes at once, as in training
        # A calibration, not a figure: a few CPU steps, each synchronous, so the cap is checked
        # against finished work after every step (nothing queued can overrun it).
        compute, t_end = [], clock() + CALIBRATION_MAX_S
        for _ in range(compute_steps):
            t = clock()
            solo_step()
            compute.append(clock() - t)
            if clock() > t_end:
                break
        out["compute_times_s"] = compute
        del solo, solo_step

        for k, cfg in enumerate(windows):
            # 2. A fresh module with the initial weights, wrapped as dlbench scale wraps it.
            model = spec.build(size).to(device)
            model.load_state_dict(initial.state_dict())
            model.train(True)
            scfg = ScalingConfig(base=cfg.base, gpus=world, strategy=cfg.strategy,
                                 backend="gloo", bucket_mb=cfg.bucket_mb, nnodes=world)
            dist.barrier()               # nobody sends while the parent reshapes the link
            between(k)
            step = wrap_strategy(scfg, spec, model, x, y, device)
            window = MeasuredWindow(device, clock=clock)
            window.first_step(step)
            window.warm_up(step, cfg.warmup_steps)
            dist.barrier()               # the window starts together on every host

            # 3. The window, a fixed count of steps (every link and strategy trains the same
            # iterations, so the loss curves line up), with the counters around it.
            losses: list[float] = []

            def logged_step(step: Callable[[], torch.Tensor] = step) -> torch.Tensor:
                loss = step()
                # note: a host read of the loss every step, for rank 0's curve; on the CPU the
                # step has already finished, so it drains no queue
                losses.append(float(loss.detach()))
                return loss

            tx0, rx0 = counters(dev)
            window.run(logged_step, cfg.steps)
            tx1, rx1 = counters(dev)
            times = list(window.step_times_s)
            ends = list(itertools.accumulate(times))   # the steps tile the window
            first_step_s = window.first_step_s
            shard = [0] * world
            if cfg.strategy == "ps":
                # The assignment ParameterServer makes (by element count; one dtype here).
                for s, owner in zip(sizes, assign_shards([p.numel() for p in params], world)):
                    shard[owner] += s
            result = {
                "strategy": cfg.strategy, "link": cfg.link, "step_times_s": times,
                "losses": losses, "step_end_s": ends, "tx_bytes": tx1 - tx0,
                "rx_bytes": rx1 - rx0, "samples_per_step": cfg.base.batch_size,
                "shard_bytes": shard, "first_step_s": first_step_s,
                # Repeated in every window, so that each window's file stands alone.
                "compute_times_s": compute, "param_count": out["param_count"],
                "grad_bytes": out["grad_bytes"], "unit": spec.unit}
            out["windows"].append(result)
            on_window(k, result)
            del step, model
    return out
