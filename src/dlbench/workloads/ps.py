"""A synchronous parameter server on torch.distributed primitives, as the 2017 distributed
TensorFlow study over 1/10 GbE and InfiniBand ran one.

Every rank is a worker; the parameters are split into shards, each owned by one rank (the
"parameter server" for that shard, as that study's PS tasks shared the worker machines). One step:

1. every worker runs forward and backward on its own batch;
2. each shard's gradients are flattened into one buffer and *reduced to its owner* (``reduce``);
3. the owner averages them and applies the optimizer to its shard alone (its optimizer state
   lives nowhere else);
4. the owner *broadcasts* the updated shard back to every worker.

That is 2 x ranks collectives per step and a full parameter broadcast, against DDP's one
bucketed all-reduce: the difference is what the strategy comparison shows. With the same model,
data and seed, the parameters after k steps equal DDP's (tests/test_distributed.py).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from dlbench.models.base import ModelSpec
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads.throughput import autocast_factory, make_optimizer


def assign_shards(sizes: list[int], ranks: int) -> list[int]:
    """Owner rank of each parameter: greedy by size onto the least-loaded rank (stable order).

    Balancing bytes, not counts, keeps one owner from carrying the big layers alone (the load
    imbalance that study saw on its busiest parameter servers).
    """
    load = [0] * ranks
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(ranks), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


class ParameterServer:
    """The gradient-to-owner, update, parameter-broadcast half of a ps step."""

    def __init__(self, params: list[torch.nn.Parameter], optimizer: str,
                 group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        owners = assign_shards([p.numel() for p in params], self.world)
        # Shards in rank order; the parameters inside each in model order.
        self.shards = [[p for p, o in zip(params, owners) if o == r] for r in range(self.world)]
        mine = self.shards[self.rank]
        self.opt = make_optimizer(optimizer, mine) if mine else None
        # Global (rank-0 numbering) rank of each owner, which reduce/broadcast take.
        self._global = [dist.get_global_rank(group, r) if group is not None else r
                        for r in range(self.world)]

    def exchange_gradients(self, scale: float = 1.0) -> torch.Tensor | None:
        """Reduce each shard's gradients to its owner and average them there.

        Returns, on the owner, a flag tensor that is nonzero when its averaged gradients hold an
        inf or NaN (fp16 loss scaling); None where this rank owns nothing.
        """
        flag = None
        for r, shard in enumerate(self.shards):
            if not shard:
                continue
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in shard]
            buf = _flatten_dense_tensors(grads)
            dist.reduce(buf, dst=self._global[r], op=dist.ReduceOp.SUM, group=self.group)
            if r == self.rank:
                buf.mul_(1.0 / (self.world * scale))  # DDP's averaging, and the loss scale undone
                flag = (~torch.isfinite(buf)).any().to(torch.float32).reshape(1)
                for p, g in zip(shard, _unflatten_dense_tensors(buf, grads)):
                    p.grad = g
        return flag

    def apply_and_broadcast(self, skip: bool = False) -> None:
        """The owners step their optimizer (unless ``skip``), then send the shards back."""
        if self.opt is not None and not skip:
            self.opt.step()
        for r, shard in enumerate(self.shards):
            if not shard:
                continue
            with torch.no_grad():
                buf = _flatten_dense_tensors([p.data for p in shard])
                dist.broadcast(buf, src=self._global[r], group=self.group)
                if r != self.rank:
                    for p, v in zip(shard, _unflatten_dense_tensors(buf, [p.data for p in shard])):
                        p.data.copy_(v)

    def zero_grad(self, model: torch.nn.Module) -> None:
        model.zero_grad(set_to_none=True)


class _LossScale:
    """Dynamic fp16 loss scaling agreed by every rank (GradScaler's rule: halve on inf, double
    after 2000 clean steps), so that all ranks scale their losses alike."""

    def __init__(self, init: float = 2.0 ** 16, interval: int = 2000) -> None:
        self.scale, self.interval, self.clean = init, interval, 0

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale, self.clean = self.scale / 2, 0
        else:
            self.clean += 1
            if self.clean >= self.interval:
                self.scale, self.clean = self.scale * 2, 0


def build_ps_step(cfg: ThroughputConfig, spec: ModelSpec, model: torch.nn.Module,
                  x: torch.Tensor, y: torch.Tensor, device: torch.device,
                  group: dist.ProcessGroup | None = None) -> Callable[[], torch.Tensor]:
    """One synchronous parameter-server training step; returns the local loss, unsynchronised
    (except with fp16, whose skip decision all ranks must share: one small all-reduce and a
    host read per step, as GradScaler's own sync point)."""
    autocast = autocast_factory(cfg.precision, device)
    ps = ParameterServer([p for p in model.parameters() if p.requires_grad], cfg.optimizer, group)
    scaler = _LossScale() if cfg.precision == "fp16" else None

    def ps_step() -> torch.Tensor:
        with autocast():
            loss = spec.loss(model(x), y)
        ps.zero_grad(model)
        if scaler is None:
            loss.backward()
            ps.exchange_gradients()
            ps.apply_and_broadcast()
            return loss
        (loss * scaler.scale).backward()
        flag = ps.exchange_gradients(scaler.scale)
        found = torch.zeros(1, device=device) if flag is None else flag
        dist.all_reduce(found, op=dist.ReduceOp.MAX, group=group)
        skip = bool(found.item())  # note: a sync point, as GradScaler.step's found_inf read
        ps.apply_and_broadcast(skip=skip)
        scaler.update(skip)
        return loss

    return ps_step
