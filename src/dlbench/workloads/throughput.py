"""Throughput of one model on one device with synthetic data kept on the device.

The data stays on the device, as in tf_cnn_benchmarks' synthetic mode, so the figure is the
model's speed, not the input pipeline's. The steps run through the one measured window
(:mod:`dlbench.measure.window`): the first step and the warm-up timed apart, then a loop of
``step(); timer.lap()`` and a cheap clock read; the stopping rule is consulted at most every
``CHECK_INTERVAL_S`` and reads only events the GPU has already passed, so nothing in the loop
drains the GPU: the host waits only when it has queued a second of work (``IN_FLIGHT_S``), and
then for an older step.

Measurement code prints nothing and writes nothing: it returns a record.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from dlbench import telemetry
from dlbench.measure.kernels import profile_steps
from dlbench.measure.memory import memory_breakdown, peak_memory, reset_peak_memory
from dlbench.measure.timer import synchronize
from dlbench.measure.window import MeasuredWindow
from dlbench.models import get_model
from dlbench.models.base import ModelSpec
from dlbench.models.zoo.text import pad_vocabulary
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.workloads.checkpointing import enable_checkpointing
from dlbench.workloads.devices import UnsupportedError, check_supported, resolve_device
from dlbench.workloads.size_guard import check_fits
from dlbench.workloads.step import update

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class NanLossError(RuntimeError):
    """The loss was NaN or infinite: the figure would describe a broken training run."""

    error_type = ErrorType.NAN  # the row it becomes (dlbench.launch.failures.classify)


@contextlib.contextmanager
def precision_flags(precision: str, device: torch.device,
                    autotune: bool = True) -> Iterator[None]:
    """Set TF32 and cuDNN autotuning for the run and restore the process's settings after.

    ``fp32`` means true IEEE fp32: PyTorch lets cuDNN use TF32 for convolutions by default, which
    would make an "fp32" figure a TF32 one on Ampere and newer GPUs.
    ``autotune=False`` where the config says so (``--no-autotune``) and for nn.DataParallel:
    cuDNN's v8 API keeps its autotuning results per thread (pytorch/pytorch#191744), and
    DataParallel runs each replica in a new thread every step, so with autotuning on, every step
    would autotune again: on four H200s that made DataParallel 5 to 10 times slower than one
    GPU. Without it, cuDNN's heuristics pick.
    """
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    tf32 = precision == "tf32"
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    # Autotune convolution algorithms for the fixed input shape, as every serious CNN benchmark does.
    torch.backends.cudnn.benchmark = device.type == "cuda" and autotune
    try:
        yield
    finally:
        (matmul, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved
        torch.set_float32_matmul_precision(matmul)


@contextlib.contextmanager
def compiled_graphs_freed(cfg: ThroughputConfig) -> Iterator[None]:
    """Drop compiled graphs after a compiled run, failed or not: they hold device memory, and the
    next model with the same forward code would count against dynamo's recompile limit."""
    try:
        yield
    finally:
        if cfg.compile:
            torch._dynamo.reset()


def autocast_factory(precision: str, device: torch.device,
                     cache: bool = True) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the autocast context for ``precision`` (a null context for fp32 and tf32).

    ``cache=False`` for a CUDA graph capture: autocast's cast cache would hold tensors made
    during the capture that a replay does not refresh (PyTorch's CUDA-graph notes).
    """
    dtype = AUTOCAST_DTYPES.get(precision)
    if not dtype:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


def make_optimizer(name: str, params: list[torch.nn.Parameter], impl: str = "default",
                   capturable: bool = False) -> torch.optim.Optimizer:
    """The optimizer of a training step: ``sgd`` (momentum 0.9, as tf_cnn_benchmarks) or ``adamw``;
    ``impl`` picks PyTorch's default, the foreach or the fused kernels (``fused=True``, which
    also lets GradScaler skip an overflowed step on the device).

    ``capturable`` for a step a CUDA graph captures: AdamW refuses a capture without it, as
    its step count must then live on the device; SGD keeps no such count.
    """
    kernels = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[impl]
    groups = _param_groups(params)
    if name == "sgd":
        opt = torch.optim.SGD(groups, lr=1e-3, momentum=0.9, **kernels)  # as tf_cnn_benchmarks
        if impl == "fused":
            # Fused SGD makes its momentum buffers with empty_like on its first step and lets
            # the kernel skip a step GradScaler found overflowed; when that first step is the
            # skipped one (fp16's first steps usually are), the buffers stay uninitialised and
            # the next step adds that garbage to the weights (the loss was NaN within steps on
            # an H100). Zeroed buffers make the first real step b = 0.9*0 + g = g, what stock
            # SGD does, skipped steps or not.
            for p in params:
                opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
        return opt
    return torch.optim.AdamW(groups, lr=1e-4, capturable=capturable, **kernels)


def _param_groups(params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
    """One group of ``params``, or one per kind when DTensor shards and plain tensors mix (a
    tensor-parallel model: its blocks' matmuls split, its embeddings and norms whole): the
    foreach and fused kernels, PyTorch's default on a GPU, take one kind per call, and an
    optimizer calls them once per group."""
    from torch.distributed.tensor import DTensor  # heavy: distributed

    sharded = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    return [{"params": g} for g in (sharded, plain) if g]


def attention_context(backend: str | None) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context that pins scaled-dot-product attention to ``backend``."""
    if backend is None:
        return contextlib.nullcontext
    member = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    return lambda: sdpa_kernel(member)


def graphed(step: Callable[[], torch.Tensor], device: torch.device,
            warmup: int = 3) -> Callable[[], torch.Tensor]:
    """``step`` captured in one CUDA graph on its first call, then replayed.

    The recipe of PyTorch's "whole-network capture" notes: a few eager steps on a side stream
    (lazy state such as momentum buffers gets allocated outside the graph), then the capture.
    The inputs are the synthetic batch, already static. The returned step gives the output
    tensor the graph rewrites on every replay; the first call's time holds warm-up and capture.
    """
    state: dict = {}

    def replay() -> torch.Tensor:
        graph = state.get("graph")
        if graph is None:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    step()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["out"] = step()
            state["graph"] = graph
        graph.replay()
        return state["out"]
    return replay


def build_step(cfg: ThroughputConfig, spec: ModelSpec, model: torch.nn.Module,
               x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], torch.Tensor]:
    """The function one step calls: returns the loss (train) or the output (eval), unsynchronised."""
    step = _eager_step(cfg, spec, model, x, y, device)
    attention = attention_context(cfg.attention)
    if cfg.attention is not None:
        inner = step

        def step() -> torch.Tensor:
            with attention():
                return inner()
        step.__dict__.update(inner.__dict__)
    if cfg.cuda_graph:
        if device.type != "cuda":
            raise UnsupportedError("cuda_graph needs a CUDA GPU", "cuda_graph")
        capture = graphed(step, device)
        capture.__dict__.update(step.__dict__)
        return capture
    return step


def _eager_step(cfg: ThroughputConfig, spec: ModelSpec, model: torch.nn.Module,
                x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], torch.Tensor]:
    autocast = autocast_factory(cfg.precision, device, cache=not cfg.cuda_graph)

    if cfg.mode == "eval":
        def eval_step() -> torch.Tensor:
            with torch.no_grad(), autocast():
                return model(x)
        return eval_step

    if cfg.method == "fwd-bwd":
        # The ms-per-batch scripts time forward + out.sum().backward(): no loss, no optimizer.
        def fwd_bwd_step() -> torch.Tensor:
            model.zero_grad(set_to_none=True)
            with autocast():
                out = model(x).float().sum()
            out.backward()
            return out
        return fwd_bwd_step

    opt = make_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad],
                         cfg.optimizer_impl, capturable=cfg.cuda_graph)
    # fp16 needs loss scaling (a sync per step unless the optimizer is fused: see
    # workloads.step.update).
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None

    def forward_loss(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return spec.loss(model(inputs), targets)
    if cfg.compile_loss:  # the model is left uncompiled for this (see measure)
        forward_loss = torch.compile(forward_loss, mode=cfg.compile)

    def train_step() -> torch.Tensor:
        with autocast():
            loss = forward_loss(x, y)
        update(loss, opt, scaler)
        return loss
    train_step.optimizer = opt  # read once after the window, to count its state's bytes
    # Its scale is read before and after the window (skipped steps); a CUDA graph's replays
    # update that same scale tensor in place, so the count holds for a captured step too.
    train_step.scaler = scaler
    return train_step


def measure(cfg: ThroughputConfig, env: dict, clock: Callable[[], float] = time.perf_counter,
            flops: Callable[[ModelSpec, str, int | None], int | None] | None = None,
            idle_baseline: bool = True) -> ThroughputRecord:
    """Run one config and return its record. Raises on failure; the launchers turn that into a row.
    ``idle_baseline=False``: no wait for the GPU's idle power first (its record has no idle W)."""
    if cfg.framework == "jax":  # the same window and record, JAX's model and step
        from dlbench.frameworks.jax import require
        require()  # one line naming the extra when JAX is missing
        from dlbench.frameworks.jax.measure import measure as measure_jax  # heavy: jax
        return measure_jax(cfg, env, clock, flops, idle_baseline=idle_baseline)
    device = resolve_device(cfg.device)
    spec = get_model(cfg.model)
    check_supported(cfg, spec, device)
    check_fits(cfg, spec, device)  # a model far too large: refused before it is built
    torch.manual_seed(cfg.seed)
    size = cfg.input_size or spec.input_size

    # Telemetry samples on its own thread; the loop only marks the window (see dlbench.telemetry).
    with precision_flags(cfg.precision, device, cfg.autotune), compiled_graphs_freed(cfg), \
            telemetry.for_benchmark(cfg.telemetry_interval_s, device, env) as sampler:
        if idle_baseline:  # GPU power before anything runs: the baseline
            sampler.idle(telemetry.IDLE_BASELINE_S)
        t = clock()
        if cfg.pad_vocab:  # before the move: the device never holds both embedding tables
            model = spec.build(size)
            pad_vocabulary(model)
            model = model.to(device)
        else:
            model = spec.build_on(device, size)
        # Token ids and targets stay in the unpadded vocabulary (spec.num_classes).
        x, y = spec.make_batch(cfg.batch_size, device, size)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        model.train(cfg.mode == "train")
        if cfg.checkpointing:
            enable_checkpointing(model, cfg.checkpoint_policy)
        if cfg.compile and not cfg.compile_loss:  # else the step compiles model and loss
            model = torch.compile(model, mode=cfg.compile)
        synchronize(device)
        build_s = clock() - t
        reset_peak_memory(device)

        step = build_step(cfg, spec, model, x, y, device)

        # First step apart: it holds compilation, cuDNN autotuning and lazy initialisation.
        window = MeasuredWindow(device, clock=clock, mark=sampler.mark)
        out = window.first_step(step)
        check_finite(cfg, out)

        window.warm_up(step, cfg.warmup_steps, cfg.warmup_seconds)  # ends with a sync
        scaler = getattr(step, "scaler", None)
        scale0 = float(scaler.get_scale()) if scaler is not None else None  # a sync, outside

        # The measured window: no synchronisation until it ends (see dlbench.measure.window).
        out = window.run(step, cfg.stop)
        final = check_finite(cfg, out)
        loss_scale = (scale0, float(scaler.get_scale())) if scaler is not None else None
        memory = peak_memory(device)
        memory.update(memory_breakdown(model, getattr(step, "optimizer", None), (x, y), memory))
        # After the window and the memory peak: the profiler's cost shows in neither.
        profile = profile_steps(step, cfg.profile_steps, device) if cfg.profile_steps else None

    w = window.times()
    return ThroughputRecord(
        config=cfg, env=env, step_times_s=w.step_times_s, warmup_times_s=w.warmup_times_s,
        first_step_s=w.first_step_s, build_s=build_s, window_wall_s=w.wall_s,
        stop_reason=w.stop_reason, samples_per_step=cfg.batch_size, unit=spec.unit,
        units_per_sample=spec.units_per_sample(size),
        # The unpadded spec's count even with --pad-vocab: MFU counts only useful work.
        flops_per_sample=(flops or count_flops_safe)(spec, cfg.mode, size),
        memory=memory, final_loss=final, loss_scale=loss_scale, profile=profile,
        telemetry=telemetry.finish(sampler.stop(), len(w.step_times_s) * cfg.batch_size),
    )


def check_finite(cfg: ThroughputConfig, out: torch.Tensor) -> float | None:
    """The loss as a float (train), raising on NaN/inf; None in eval mode, whose output is logits."""
    if cfg.mode == "eval":
        return None
    value = float(out.detach().float())  # note: a sync point, outside the window
    if value != value or value in (float("inf"), float("-inf")):
        raise NanLossError(f"loss is {value} ({cfg.label}); with fp16, try bf16 or a smaller learning rate")
    return value


def count_flops_safe(spec: ModelSpec, mode: str, size: int | None) -> int | None:
    """Counted FLOPs per sample, or None if the counter cannot trace this model (never fatal)."""
    try:
        # here, not at the top: the counter's import chain (torch's FLOP counter, triton) is
        # itself one of the things that may fail, and a failure must not stop the run
        from dlbench.measure.flops import count_flops
        return count_flops(spec, "train" if mode == "train" else "eval", size)
    except Exception:  # a FLOP count is an annotation; its failure must not lose a measurement
        return None
