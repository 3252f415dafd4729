"""From what a user asks for to the configs that are measured: the device's facts, default
batches, the product of a sweep's flags (:func:`expand`) and of a scaling sweep's, which flag
applies to which model, the rendezvous of a multi-host job, and the pre-flight check that runs
before anything is measured.

The commands parse flags into these calls and print what comes back; the rules live here.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import torch

from dlbench.config import ConfigError
from dlbench.launch.torchrun import Rendezvous, slurm_settings
from dlbench.models import get_model
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.suites import DeviceFacts, gpu_batch
from dlbench.workloads.devices import bf16_available, check_supported, resolve_device
from dlbench.workloads.size_guard import check_fits, check_scaling_fits
from dlbench.workloads.tp import tp_blocks

C = TypeVar("C")


def device_facts() -> DeviceFacts:
    """CUDA or not, bf16 or not, and the first GPU's memory: what suites and batches depend on."""
    cuda = torch.cuda.is_available()
    mem = torch.cuda.get_device_properties(0).total_memory if cuda else None
    return DeviceFacts(cuda=cuda, bf16=bf16_available(), memory_bytes=mem)


def preflight(configs: Iterable[ThroughputConfig], fits: bool = True) -> None:
    """Every model known, every precision possible on its device and, unless ``fits=False``
    (a sharded scaling run splits the model), every model small enough for one device:
    checked before anything runs."""
    for cfg in configs:
        spec = get_model(cfg.model)
        device = resolve_device(cfg.device)
        check_supported(cfg, spec, device)
        if fits:
            check_fits(cfg, spec, device)


def preflight_scaling(configs: Iterable[ScalingConfig]) -> None:
    """Every scaling config's model small enough for its ranks, split as its strategy splits
    it (``workloads.size_guard.check_scaling_fits``), and under tp and fsdp+tp a model tensor
    parallelism can split (:func:`check_tp_splits`): checked before any process starts."""
    for cfg in configs:
        check_scaling_fits(cfg, get_model(cfg.base.model), resolve_device(cfg.base.device))
        check_tp_splits(cfg)


def check_tp_splits(cfg: ScalingConfig) -> None:
    """Under tp and fsdp+tp, the model's blocks have the layout TP splits, and their heads and
    width divide by the degree (``workloads.tp.tp_blocks``), checked on a copy built on the meta
    device (no memory, no initialisation): otherwise every rank of every job would refuse it.
    A model that cannot be built there is left to the ranks, which refuse it the same way."""
    if cfg.tp_degree == 1:
        return
    spec = get_model(cfg.base.model)
    try:
        with torch.device("meta"):
            model = spec.build(cfg.base.input_size)
    except Exception:  # noqa: BLE001  a factory that insists on real tensors: the ranks check
        return
    tp_blocks(model, cfg.tp_degree)


def check_gpu_counts(counts: Iterable[int], gpu: bool, visible: int) -> None:
    """Each ``--gpus`` count (per host) at most the GPUs this host shows: a job of more ranks
    than GPUs would start every rank only for the extra ones to refuse. Without CUDA the count
    is of gloo processes, which any count can have."""
    if not gpu:
        return
    for n in counts:
        if n > visible:
            where = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise ConfigError(f"gpus {n}: this host has {visible} visible GPU(s)"
                              + (f" (CUDA_VISIBLE_DEVICES={where})" if where is not None else "")
                              + f"; give gpus={visible} or fewer", "gpus")


def on_gpu(device: str, facts: DeviceFacts) -> bool:
    """Whether ``--device`` (auto, cpu, cuda, cuda:N) runs on a GPU here."""
    return device != "cpu" and facts.cuda


def tuned_precision(facts: DeviceFacts, gpu: bool) -> str:
    """The precision tuned mode starts from: bf16 on a GPU that has it, fp16 on one without,
    fp32 on the CPU."""
    return facts.mixed if gpu else "fp32"


def cpu_batch(model: str) -> int:
    """A CPU-sized default batch: a quarter of the GPU default, at most 16."""
    return max(1, min(16, get_model(model).default_batch // 4))


def default_batch(facts: DeviceFacts, gpu: bool) -> Callable[[str], int]:
    """The batch a model gets when none is given: its GPU default scaled to this card's memory,
    or a CPU-sized one."""
    if gpu:
        return lambda model: gpu_batch(model, facts.memory_bytes)
    return cpu_batch


def expand(
    models: Sequence[str],
    batch_sizes: Sequence[int | None],
    modes: Sequence[str] = ("train",),
    precisions: Sequence[str] = ("fp32",),
    compiles: Sequence[str | None] = (None,),
    channels_last: Sequence[bool] = (False,),
    cuda_graphs: Sequence[bool] = (False,),
    default_batch: Callable[[str], int] | None = None,
    **common: Any,
) -> list[ThroughputConfig]:
    """The cross product of the listed values, in a stable order (model outermost).

    A batch size of None stands for ``default_batch(model)``: the model's batch for the device.
    """
    out = []
    for model, bs, mode, prec, comp, cl, graph in itertools.product(
            models, batch_sizes, modes, precisions, compiles, channels_last, cuda_graphs):
        if bs is None:
            if default_batch is None:
                raise ConfigError("batch_size None (the model's default) needs "
                                  "default_batch, which sizes it for a device", "batch_size")
            bs = default_batch(model)
        out.append(ThroughputConfig(model=model, batch_size=bs, mode=mode, precision=prec,
                                    compile=comp, channels_last=cl, cuda_graph=graph, **common))
    return out


def applicable(cfg: ThroughputConfig) -> ThroughputConfig:
    """``cfg`` without the flags that mean nothing for its model: channels_last for a text
    model, a padded vocabulary for an image model. In a mixed ``-m`` list each model is then
    measured once, without the flag that does not apply to it."""
    kind = get_model(cfg.model).kind
    return replace(cfg, channels_last=cfg.channels_last and kind == "image",
                   pad_vocab=cfg.pad_vocab and kind == "text")


def unique(configs: Iterable[C]) -> list[C]:
    """Configs in order, each key once (the last of equal keys wins, where the first stood)."""
    return list({c.key(): c for c in configs}.values())  # type: ignore[attr-defined]


def with_compiled_loss(configs: Sequence[ThroughputConfig],
                       choices: Sequence[bool]) -> list[ThroughputConfig]:
    """``--compile-loss on`` applies to the compiled training steps of the sweep; the others
    (eager, eval) run once without it. Refused where no config of the sweep can take it."""
    out = []
    for cfg in configs:
        if cfg.compile and cfg.mode == "train" and cfg.method == "standard":
            out += [replace(cfg, compile_loss=on) for on in choices]
        else:
            out.append(cfg)
    if any(choices) and not any(c.compile_loss for c in out):
        raise ConfigError('compile_loss on needs a compiled training step: add compile="default" '
                          '(or another mode) and keep mode="train", method="standard"',
                          "compile_loss")
    return out


def auto_setups(configs: Iterable[ThroughputConfig]) -> list[ThroughputConfig]:
    """The setups ``-b auto`` sizes: each config's setup once, at batch 1 (the unknown)."""
    return unique(replace(c, batch_size=1) for c in configs)


# -- scaling ------------------------------------------------------------------------------------
def scaling_configs(bases: Sequence[ThroughputConfig], gpus: Sequence[int],
                    strategies: Sequence[str], interconnects: Sequence[str], *, nnodes: int = 1,
                    bucket_mb: float = 25.0, backend: str = "auto") -> list:
    """Every (interconnect, base, strategy, GPUs per host) of a scaling sweep, interconnect
    outermost (an A/B of profiles reads as two complete blocks). ``dp`` (one process driving
    every GPU) cannot span hosts and is left out of a multi-host job."""
    return [ScalingConfig(base=b, gpus=n * nnodes, strategy=s, interconnect=i,
                          bucket_mb=bucket_mb, backend=backend, nnodes=nnodes)
            for i in interconnects for b in bases for s in strategies for n in gpus
            if not (s == "dp" and nnodes > 1)]


def with_levers(configs: Sequence[ScalingConfig], *, tp: int | None = None,
                offload: bool = False, fp8: bool = False) -> list[ScalingConfig]:
    """``--tp``, ``--offload`` and ``--fp8`` on a sweep's scaling configs. ``--tp`` is fsdp+tp's
    degree, refused where no config is fsdp+tp and left out at one GPU (nothing to split);
    each lever is refused by :class:`ScalingConfig` for a strategy it does not apply to."""
    configs = list(configs)
    if tp is not None:
        if not any(c.strategy == "fsdp+tp" for c in configs):
            raise ConfigError("tp sets fsdp+tp's TP degree: "
                              'add strategy="fsdp+tp" (strategy="tp" splits over all gpus)',
                              "tp", also=("gpus",))
        configs = [replace(c, tp=tp) if c.strategy == "fsdp+tp" and c.gpus > 1 else c
                   for c in configs]
    if offload or fp8:
        configs = [replace(c, offload=offload, fp8=fp8) for c in configs]
    return configs


def rendezvous(*, nnodes: int = 1, node_rank: int = 0, endpoint: str | None = None,
               run_id: str = "dlbench", slurm: bool = False,
               environ: Mapping[str, str] | None = None):
    """Where the hosts of a multi-host job meet: the flags, or Slurm's environment with
    ``slurm``. A job of several hosts needs an endpoint."""
    kw = dict(nnodes=nnodes, node_rank=node_rank, endpoint=endpoint, run_id=run_id)
    if slurm:
        found = slurm_settings(os.environ if environ is None else environ)
        if not found:
            raise ConfigError("slurm: no SLURM_JOB_ID in the environment; run under srun",
                              "slurm")
        kw.update(found)
    if kw["nnodes"] > 1 and not kw["endpoint"]:
        raise ConfigError('nnodes > 1 needs rdzv_endpoint="HOST:PORT" (or slurm=True with '
                          "MASTER_ADDR set)", "nnodes")
    return Rendezvous(**kw)
