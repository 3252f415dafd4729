"""The what-if model's inputs, taken from what dlbench measured or from the model registry.

- gradient bytes: every trainable parameter x its bytes (4 for fp32 gradients; DDP and the
  parameter servers move gradients in the parameters' dtype, fp32 under autocast), counted on a
  model built on the ``meta`` device (no memory, no weights);
- the model's shape for the sharded strategies (:func:`model_shape`): parameters per FSDP unit
  (each block of the repeated stack, as :mod:`dlbench.workloads.fsdp` shards it, and the root),
  the width of the residual stream and the sequence length, on the same ``meta`` build;
- compute time per step: a one-GPU training record (``dlbench run``/``throughput``, or
  ``dlbench scale`` at 1 GPU) gives its mean step time and batch; a ``dlbench net`` record its
  compute-only calibration;
- a measured link: ``dlbench comm`` all-reduce records give the bus bandwidth of the largest size
  (nccl-tests' busbw is exactly the per-direction rate a ring needs: ring time = 2(n-1)/n x
  size / busbw) and a latency per ring step from the smallest size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from dlbench import env as envmod
from dlbench.config import ConfigError
from dlbench.models import get_model
from dlbench.whatif.sharded import ModelShape


def model_gradients(name: str, input_size: int | None = None, bytes_per_param: int = 4
                    ) -> tuple[int, tuple[int, ...]]:
    """(gradient bytes, bytes of each trainable parameter tensor in model order) of a model."""
    spec = get_model(name)
    with torch.device("meta"):
        module = spec.build(input_size)
    sizes = tuple(p.numel() * bytes_per_param for p in module.parameters() if p.requires_grad)
    return sum(sizes), sizes


def model_shape(name: str, input_size: int | None = None) -> ModelShape:
    """The units, width and sequence length of a model, as FSDP and tensor parallelism see it.

    Blocks: the children of the model's largest ``nn.ModuleList`` (what dlbench's FSDP shards one
    by one); the root: every other parameter. A unit's compute share counts its parameters held
    by anything but an ``nn.Embedding`` (a lookup has no matrix product; a head tied to the
    embedding table is a ``Linear`` too, so the tied table counts). Width: the embedding
    dimension of the largest embedding table (the tokens'); None for a model that does not take
    tokens.
    """
    from torch import nn

    from dlbench.workloads.fsdp import repeated_blocks  # what the fsdp strategy shards

    spec = get_model(name)
    with torch.device("meta"):
        module = spec.build(input_size)
    matmul = {id(p) for m in module.modules() if not isinstance(m, nn.Embedding)
              for p in m.parameters(recurse=False)}
    blocks = repeated_blocks(module)
    in_blocks = {id(p) for b in blocks for p in b.parameters()}
    root = [p for p in module.parameters() if id(p) not in in_blocks]
    tables = [m for m in module.modules() if isinstance(m, nn.Embedding)]
    token = spec.kind == "text" and tables
    return ModelShape(
        root_params=float(sum(p.numel() for p in root)),
        block_params=tuple(float(sum(p.numel() for p in b.parameters())) for b in blocks),
        root_compute=float(sum(p.numel() for p in root if id(p) in matmul)),
        block_compute=tuple(float(sum(p.numel() for p in b.parameters() if id(p) in matmul))
                            for b in blocks),
        hidden=max(tables, key=lambda m: m.num_embeddings).embedding_dim if token else None,
        seq_len=(input_size or spec.input_size) if spec.kind == "text" else None,
        name=spec.name)


@dataclass(frozen=True)
class ComputeInput:
    """A one-GPU step time taken from a record."""

    model: str
    compute_s: float
    batch: int
    record_id: str
    kind: str
    device: str
    precision: str | None = None
    input_size: int | None = None


def _device(r: Any) -> str:
    try:
        return envmod.device_label(r.env)
    except Exception:  # a record with a partial environment still gives its step time
        return "?"


def compute_inputs(records: Sequence[Any], batch: int | None = None,
                   precision: str | None = None) -> dict[str, ComputeInput]:
    """For each model, the newest record that gives a one-GPU compute time per step (of that
    batch and precision, where given)."""
    found: dict[str, ComputeInput] = {}
    for r in records:
        if not r.ok:
            continue
        base = getattr(r.config, "base", r.config)
        if (batch and base.batch_size != batch) or (precision and base.precision != precision):
            continue
        same = dict(precision=getattr(base, "precision", None),
                    input_size=getattr(base, "input_size", None))
        if r.kind == "throughput" and r.config.mode == "train" and r.config.method == "standard":
            s = r.summary()
            if s is not None:
                found[r.config.model] = ComputeInput(r.config.model, s.mean_s,
                                                     r.config.batch_size, r.id, r.kind, _device(r),
                                                     **same)
        elif r.kind == "scaling" and r.config.gpus == 1 and r.config.strategy != "dp":
            s = r.summary()
            if s is not None:
                found[r.config.model] = ComputeInput(r.config.model, s.mean_s,
                                                     r.config.base.batch_size, r.id, r.kind,
                                                     _device(r), **same)
        elif r.kind == "net" and r.compute_s:
            found[r.config.model] = ComputeInput(r.config.model, r.compute_s,
                                                 r.config.base.batch_size, r.id, r.kind,
                                                 "CPU (dlbench net)", **same)
    return found


@dataclass(frozen=True)
class MeasuredLink:
    """A link measured by ``dlbench comm``: busbw of its largest all-reduce, latency per step."""

    bandwidth_Bps: float
    latency_s: float
    ranks: int
    size_bytes: int
    record_id: str
    backend: str


def link_from_comm(records: Sequence[Any], interconnect: str | None = None,
                   ranks: int | None = None) -> MeasuredLink:
    """The measured link of the newest ``dlbench comm`` all-reduce rows (correct ones only),
    of one interconnect profile and rank count when given."""
    rows = [r for r in records if r.kind == "comm" and r.ok and r.config.op == "all_reduce"
            and r.time_s is not None and r.config.ranks > 1
            and (interconnect is None or getattr(r.config, "interconnect", "default")
                 == interconnect)
            and (ranks is None or r.config.ranks == ranks)]
    if not rows:
        which = "".join([f" under profile {interconnect}" if interconnect else "",
                         f" at {ranks} ranks" if ranks else ""])
        raise ConfigError(f"--busbw-from: no correct all_reduce records of 2+ ranks{which} in "
                          "that store; measure with 'dlbench comm --op all_reduce' first")
    last_run = rows[-1].run_id
    rows = [r for r in rows if r.run_id == last_run] or rows
    big = max(rows, key=lambda r: (r.config.size_bytes, r.busbw() or 0))
    small = min(rows, key=lambda r: r.config.size_bytes)
    n = small.config.ranks
    return MeasuredLink(big.busbw(), small.time_s / (2 * (n - 1)), big.config.ranks,
                        big.config.size_bytes, big.id, big.config.backend)
