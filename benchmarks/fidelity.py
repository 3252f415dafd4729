"""Fidelity: does dlbench change what it measures?

In one process, alternately, the same config runs through dlbench (``workloads.throughput.measure``,
with its timer, stopping rule and records) and through a bare training loop written by hand
(``bare_loop``) timed with ``perf_counter`` around one synchronize. The bare loop runs as many
steps as dlbench's window took. The median ratio dlbench / bare must sit within 0.99-1.01 on a GPU (0.98-1.02 on a
CPU, whose cores the loop shares with everything else on the machine): outside it, dlbench's own
overhead (or its timing) shows in its figures.

With --generate the same holds for LLM generation: dlbench's ``workloads.generate.measure`` (its
decode loop, a CUDA event per token, its window of requests) against a bare generation loop of
about thirty lines (a static KV cache, one prefill, a plain Python loop of decode steps with the
greedy argmax kept on the device; for --path graph the decode step captured in a CUDA graph, for
--path compile compiled and then captured), as many requests as dlbench's window measured, timed
with ``perf_counter`` around one synchronize. Both figures are output tokens per second. With
--path compile the decode step is compiled once per process and both sides run that one compiled
step (the same kernels) in every round: only the harness around it differs (see below).

With --fsdp the same holds for sharded training on several GPUs: ``dlbench scale --strategy
fsdp`` (its torchrun job, its window, its ranks' agreement on when to stop, its records) against a
bare FSDP2 loop written by hand (``bare_fsdp``) run through torchrun: the same transformers model,
``fully_shard`` on each decoder block and then on the root with the same MixedPrecisionPolicy
(parameters in the run's precision, gradients reduced in fp32), AdamW, synthetic tokens and a
cross-entropy over every position, as many steps as dlbench's window measured, timed with
``perf_counter`` around one synchronize. Both figures are tokens/s of all ranks; dlbench's is all
ranks' tokens over the slowest rank's window, the bare loop's over the slowest rank's time.
Each round starts two torchrun jobs (dlbench's, then the bare one's, or the other way round).

Reproduces the fidelity figures of docs/results/2026-11-h100.md (plain and tuned path) and
docs/results/2026-11-cpu.md. About 3 minutes on a GPU (4 rounds) or on a CPU (10 rounds).
Prints one line per round and the verdict; exits 1 outside the band. --out writes the rounds,
the config and the environment as JSON.

    python benchmarks/fidelity.py                      # GPU: ResNet-50, batch 256, bf16, NHWC, train
    python benchmarks/fidelity.py --device cpu         # CPU: tiny_cnn, batch 64, fp32, one thread
    python benchmarks/fidelity.py --out fidelity.json  # the full result as JSON
    python benchmarks/fidelity.py --cuda-graph on --optimizer-impl fused
                                                       # tuned mode's path against a bare loop
                                                       # written with the same techniques
    python benchmarks/fidelity.py --compile default --cuda-graph on --optimizer-impl fused
    python benchmarks/fidelity.py --framework jax      # dlbench's JAX path against a bare JAX
                                                       # loop (Flax, Optax, one jit, donated state)
    python benchmarks/fidelity.py --generate           # GPU: llama-3.2-1b, batch 1, 128+128
                                                       # tokens, bf16, path graph (4 rounds)
    python benchmarks/fidelity.py --generate --path compile
                                                       # one compiled decode step, run by both
                                                       # sides (compiled once per process)
    python benchmarks/fidelity.py --generate --path graph --fuse
                                                       # fused projections on both sides
    python benchmarks/fidelity.py --generate --precision fp8 --fuse
                                                       # sm_89+ GPU: the linear layers in fp8
                                                       # (torchao) on both sides
    python benchmarks/fidelity.py --generate --device cpu
                                                       # CPU: test-llama, batch 1, 16+16, fp32,
                                                       # path static (10 rounds)
    python benchmarks/fidelity.py --fsdp --gpus 2      # GPU: llama-3.2-1b, batch 4 per GPU,
                                                       # 2048 tokens, bf16, AdamW (4 rounds)
    python benchmarks/fidelity.py --fsdp --compile default --checkpointing
                                                       # blocks compiled one by one (before
                                                       # fully_shard, as torchtitan does) and
                                                       # recomputed in the backward pass
    python benchmarks/fidelity.py --fsdp --device cpu  # CPU: tiny_llama on 2 gloo processes,
                                                       # batch 4, 32 tokens, fp32 (10 rounds)

--generate takes --model (a language model: `dlbench generate --list-models`), --batch,
--precision (fp8 too: both sides quantize with the function dlbench generate --precision fp8
calls), --path (eager: model.generate() called bare against dlbench's eager path, with its
token marks, window and telemetry; static, graph or compile: the decode loops), --prompt-len and
--output-len. On an H100 the default (path graph, 4
rounds) took 3 minutes, on a CPU (10 rounds) 1 minute.

--path compile compiles the decode step once per process and runs that one compiled step on both
sides in every round, each side on its own model, KV cache and buffers: the JSON says so
("compile": "shared, once per process"; each round's "dynamo_graphs" is the count of graphs
compiled in the process so far, the same in every round). Each compile tunes its own kernels
(coordinate descent), and from one compile to the next the step's speed moves by about +-10% (on
an H100, five compiles of llama-3.2-1b per side gave 582-706 tokens/s through dlbench and 591-680
through the bare loop): with a compile on each side in every round, as this script once did, the
rounds compared compiles, not harnesses. The step compiled is this script's ``decode_step``, the
body of dlbench's ``StaticLoop.decode`` as a function of its state, with the arguments dlbench
passes (fullgraph, static shapes); it compiles at its first call, in dlbench's first request of
round 1, under dlbench's coordinate-descent tuning. The bare loop is handed it; dlbench's workload,
whose code is unchanged, gets it from the torch.compile call its decode loop makes, which the
script answers with the shared step while dlbench's run lasts (and the torch._dynamo.reset() that
ends a compiled run, freeing its graphs, is skipped then). Each side still captures its own CUDA
graph of the step, and the prefill, token marks, window and timing are each side's own. The
script stops with an error if dlbench's decode loop no longer asks for that compile, or if the
step is compiled again in a later round.

--fsdp takes --model (a transformers decoder LM of the registry: llama-*, gpt2, tiny_llama),
--batch (per GPU), --seq-len, --precision, --gpus (processes: GPUs, or gloo processes on the
CPU), --compile (each decoder block compiled before it is sharded, on both sides) and
--checkpointing (transformers' own activation checkpointing, switched on before sharding, as
dlbench does). With --compile the bare loop compiles each block's ``forward`` as dlbench does;
--bare-compile module wraps each block in torch.compile's module instead (torchtitan's
``apply_compile``), so that the two ways can be measured against each other. Both sides autocast in the run's precision as dlbench's step does, on top of
FSDP's bf16 parameters. The bare side gets the variables dlbench's launcher gives its ranks
(NVLink multicast off; OMP_NUM_THREADS=1 unless set).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Callable, Iterator, NoReturn
from pathlib import Path

import torch
import torch.nn.functional as F

from dlbench import env as envmod
from dlbench.commands.common import as_flags
from dlbench.config import ConfigError
from dlbench.launch.interconnect import interconnect_env
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model
from dlbench.models.lm import get_lm
from dlbench.records.generate import GenerateConfig, GenerateRecord
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads import fp8_inference
from dlbench.workloads import generate as generate_workload
from dlbench.workloads.fusion import fuse_projections
from dlbench.workloads.gqa_fold import fold_gqa
from dlbench.workloads.throughput import measure

# The band the median ratio must sit in, per device type.
BANDS = {"cuda": (0.99, 1.01), "cpu": (0.98, 1.02)}

#: The JSON's "compile" (--generate --path compile): one compiled decode step per process, run
#: by both sides in every round (SharedDecode).
SHARED_COMPILE = "shared, once per process"


def bare_loop(model_name: str, batch: int, precision: str, channels_last: bool,
              device: torch.device, warmup: int, steps: int, compile: str | None = None,
              graph: bool = False, fused: bool = False) -> float:
    """The loop a careful user would write by hand; returns samples/s."""
    spec = get_model(model_name)
    torch.manual_seed(0)
    model = spec.build().to(device)
    x, y = spec.make_batch(batch, device)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    if compile:
        model = torch.compile(model, mode=compile)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, fused=fused or None)
    dtype = {"bf16": torch.bfloat16}.get(precision)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None,
                            cache_enabled=not graph):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if graph:  # PyTorch's CUDA-graph notes, "whole network capture", as written there
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None,
                                cache_enabled=False):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
        step = g.replay

    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return steps * batch / (time.perf_counter() - t)


def bare_loop_jax(model_name: str, batch: int, precision: str, device: str, warmup: int,
                  steps: int) -> float:
    """The JAX loop a careful user would write by hand (Flax model, Optax SGD, one jit with
    donated state, one wait at the end); returns samples/s."""
    import jax  # heavy: jax
    import jax.numpy as jnp  # heavy: jax
    import optax  # heavy: jax

    from dlbench.frameworks.jax.models import JAX_MODELS
    spec = get_model(model_name)
    dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32
    module = JAX_MODELS[model_name].build(dtype, spec.input_size, spec.num_classes)
    dev = jax.devices("cpu" if device == "cpu" else None)[0]
    with jax.default_device(dev), jax.default_matmul_precision("highest"):
        kx, ky = jax.random.split(jax.random.key(1))
        s = spec.input_size
        x = (jax.random.normal(kx, (batch, s, s, 3)) if spec.kind == "image"
             else jax.random.randint(kx, (batch, s), 0, spec.num_classes))
        y = jax.random.randint(ky, (batch,) if spec.kind == "image" else (batch, s), 0,
                               spec.num_classes)
        v = module.init({"params": jax.random.key(0), "dropout": ky}, x[:1], train=False)
        tx = optax.sgd(1e-3, momentum=0.9)
        state = (v["params"], v.get("batch_stats", {}), tx.init(v["params"]), jnp.int32(0))

        @partial(jax.jit, donate_argnums=0)
        def step(state, x, y):
            params, stats, opt, i = state
            def loss_fn(p):
                out, upd = module.apply({"params": p, **({"batch_stats": stats} if stats else {})},
                                        x, train=True, mutable=["batch_stats"],
                                        rngs={"dropout": jax.random.fold_in(ky, i)})
                logits = out.astype(jnp.float32)
                return optax.softmax_cross_entropy_with_integer_labels(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).mean(), upd
            (loss, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
            u, opt = tx.update(g, opt, params)
            return (optax.apply_updates(params, u), upd.get("batch_stats", {}), opt, i + 1), loss

        for _ in range(warmup):
            state, loss = step(state, x, y)
        loss.block_until_ready()
        t = time.perf_counter()
        for _ in range(steps):
            state, loss = step(state, x, y)
        loss.block_until_ready()
        return steps * batch / (time.perf_counter() - t)


def decode_step(model, cache, token: torch.Tensor, position: torch.Tensor) -> None:
    """One decode step over a static KV cache, as a function of its state: the body of
    dlbench's ``StaticLoop.decode`` (the model's forward on the last token at its position,
    the greedy argmax written into the step's input buffer, the position advanced, all on the
    device). --path compile compiles this function once per process (:class:`SharedDecode`)
    and both sides run it on their own model, cache and buffers."""
    out = model(input_ids=token, position_ids=position, past_key_values=cache, use_cache=True)
    token.copy_(out.logits[:, -1:].argmax(-1))
    position.add_(1)


class SharedDecode:
    """--path compile: the decode step compiled once per process and run by both sides.

    A compile of the decode step tunes its own kernels, and from one compile to the next the
    step's speed moves by about +-10% on an H100: with each side compiling its own in every
    round, a round's ratio compared two compiles, not two harnesses. Here :func:`decode_step`
    is compiled once (``torch.compile`` with the arguments dlbench's ``StaticLoop`` passes) and
    both sides call that one compiled function in every round, each on its own model, KV cache
    and buffers (its guards hold for every model the rounds build: same class, same shapes, so
    it is compiled once, at its first call, inside dlbench's first request of round 1, under
    dlbench's coordinate-descent tuning). Each side still captures its own CUDA graph of it.

    The bare loop is handed the step as an argument; dlbench's workload through
    :meth:`in_dlbench`, while its ``measure`` runs.
    """

    #: What dlbench's StaticLoop._prepare passes to torch.compile for its decode step.
    COMPILE_KWARGS = {"fullgraph": True, "dynamic": False}

    def __init__(self) -> None:
        self.step = torch.compile(decode_step, **self.COMPILE_KWARGS)
        self.handed = 0  # dlbench runs that were handed the step

    def bind(self, model, cache, token: torch.Tensor, position: torch.Tensor
             ) -> Callable[[], None]:
        """The shared step on one side's state: a call runs one decode step."""
        return partial(self.step, model, cache, token, position)

    @contextlib.contextmanager
    def in_dlbench(self) -> Iterator[None]:
        """While dlbench's ``generate.measure`` runs (path compile): its ``StaticLoop``'s
        ``torch.compile(self.decode, fullgraph=True, dynamic=False)`` returns the shared step
        bound to that loop's own model, cache and buffers (every other ``torch.compile`` call
        goes through untouched), and the ``torch._dynamo.reset()`` that ends its run (which
        frees its compiled graphs) is skipped: it would drop the shared step's graph, and the
        next round would compile anew. The workload's code is not changed; what it times around
        the step (prefill, token marks, window, capture) is its own."""
        real_compile, real_reset = torch.compile, torch._dynamo.reset
        loop_decode = generate_workload.StaticLoop.decode
        handed = 0

        def compile_(model=None, **kwargs):
            nonlocal handed
            if getattr(model, "__func__", None) is not loop_decode:
                return real_compile(model, **kwargs)
            if kwargs != self.COMPILE_KWARGS:
                raise SystemExit(f"dlbench compiles its decode step with {kwargs}, the shared "
                                 f"step is compiled with {self.COMPILE_KWARGS}: update "
                                 "SharedDecode.COMPILE_KWARGS in benchmarks/fidelity.py")
            loop = model.__self__
            handed += 1
            return self.bind(loop.model, loop.cache, loop.token, loop.position)

        torch.compile, torch._dynamo.reset = compile_, lambda: None
        try:
            yield
        finally:
            torch.compile, torch._dynamo.reset = real_compile, real_reset
        if handed != 1:
            raise SystemExit(f"dlbench's compile path asked torch.compile for StaticLoop.decode "
                             f"{handed} times in one run (expected once): the shared step's "
                             "seam in benchmarks/fidelity.py (SharedDecode.in_dlbench) no "
                             "longer matches dlbench's workload")
        self.handed += 1


def dynamo_graphs() -> int:
    """Graphs torch.compile has compiled in this process so far (dynamo's own count): with
    the shared step, 1 from round 1 on."""
    from torch._dynamo.utils import counters  # heavy: dynamo
    return int(counters["stats"]["unique_graphs"])


@torch.no_grad()
def bare_generate(model_name: str, batch: int, prompt_len: int, output_len: int,
                  precision: str, path: str, device: torch.device, warmup: int,
                  requests: int, fuse: bool = False, fold: bool = False,
                  shared: SharedDecode | None = None) -> float:
    """The generation loop a careful user would write by hand over a static KV cache (as
    gpt-fast does): one prefill, then one forward per token, the greedy argmax kept on the
    device; with path graph the decode step is captured in a CUDA graph, with compile it is
    compiled first. Path eager is ``model.generate()`` called as a user calls it, nothing
    around it. With ``fuse`` the model's sibling projections are fused first by the same
    function dlbench's ``--fuse`` calls, and with ``fold`` its attention folded by the one
    ``--fold-gqa`` calls, and in fp8 its linear layers quantized (after fusion) by the one
    ``--precision fp8`` calls: the model is the same on both sides, and what is compared is
    the loop around it. With path compile and ``shared``, the decode step is ``shared``'s
    (compiled once per process, run by dlbench's side too) on this loop's own model, cache
    and buffers; without it, this loop compiles its own. Returns output tokens/s over
    ``requests`` requests after ``warmup``."""
    from transformers import StaticCache  # heavy: transformers

    dtype = generate_workload.DTYPES[precision]  # fp8 quantizes a bf16 model
    torch.manual_seed(0)
    model = get_lm(model_name).build_on(device, dtype)
    if fuse:
        fuse_projections(model)
    if fold:
        fold_gqa(model)
    if precision == "fp8":
        fp8_inference.quantize(model)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_len), device=device)
    if path == "eager":
        # What dlbench's eager path times, without its token marks, window or telemetry: a
        # check that none of them slows a loop whose host work is most of its time.
        mask = torch.ones_like(ids)

        def request() -> None:
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=output_len,
                           min_new_tokens=output_len, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
        return _timed_requests(request, warmup, requests, batch * output_len, device)
    extra = 3  # eager (compiling) decode steps before the capture; they write past the end
    cache = StaticCache(config=model.config, max_cache_len=prompt_len + output_len + extra)
    nxt = torch.zeros(batch, 1, dtype=torch.long, device=device)  # static input of a step
    pos = torch.zeros(1, 1, dtype=torch.long, device=device)      # its position, on the device
    prompt_pos = torch.arange(prompt_len, device=device)[None]

    def prefill() -> None:
        # Rewind, not reset: cache.reset() would also zero every layer's keys and values, a
        # write of the whole cache per request that is not generation (and that dlbench does
        # not do). Positions past the fill are masked out (causal mask over the positions), so
        # stale entries are never read. The fill counter is zeroed in place: a captured graph
        # reads it from this address.
        for layer in cache.layers:
            layer.cumulative_length.zero_()
        out = model(input_ids=ids, position_ids=prompt_pos, past_key_values=cache,
                    use_cache=True, logits_to_keep=1)
        nxt.copy_(out.logits[:, -1:].argmax(-1))
        pos.fill_(prompt_len)

    def decode() -> None:
        out = model(input_ids=nxt, position_ids=pos, past_key_values=cache, use_cache=True)
        nxt.copy_(out.logits.argmax(-1))
        pos.add_(1)

    step = decode
    if path == "compile":
        step = shared.bind(model, cache, nxt, pos) if shared is not None else \
            torch.compile(decode, fullgraph=True, dynamic=False)
    if path in ("graph", "compile") and device.type == "cuda":
        import torch._inductor.config as inductor  # heavy: inductor
        prefill()  # the cache's tensors are allocated by its first update: outside the graph
        side = torch.cuda.Stream()  # warm up (and compile) on a side stream, then capture
        side.wait_stream(torch.cuda.current_stream())
        # Coordinate-descent tuning of inductor's kernels, as gpt-fast sets it (and dlbench).
        tuning = inductor.patch(coordinate_descent_tuning=True) if path == "compile" else \
            contextlib.nullcontext()
        with torch.cuda.stream(side), tuning:
            for _ in range(extra):
                step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        step = g.replay

    def request() -> None:
        prefill()  # the first token
        for _ in range(output_len - 1):
            step()

    return _timed_requests(request, warmup, requests, batch * output_len, device)


def _timed_requests(request, warmup: int, requests: int, tokens: int,
                    device: torch.device) -> float:
    """Output tokens/s of ``requests`` requests after ``warmup`` untimed ones, timed with
    perf_counter around one synchronize."""
    for _ in range(warmup):  # the first (compiles on the CPU) and the warm-up
        request()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(requests):
        request()
    sync()  # note: the one CPU-GPU sync point of the timed requests
    return requests * tokens / (time.perf_counter() - t)


def generate_rounds(a: argparse.Namespace, gpu: bool, device: torch.device, rounds_n: int,
                    env: dict) -> tuple[GenerateConfig, list[dict]]:
    """--generate: alternate dlbench's generation workload and the bare generation loop."""
    path = a.path or ("graph" if gpu else "static")
    stop = StopRule(min_steps=10, min_seconds=5.0, max_seconds=30.0) if gpu else \
        StopRule(min_steps=10, min_seconds=2.0, max_seconds=8.0, target_rel_ci=0.02)
    cfg = GenerateConfig(model=a.model or ("llama-3.2-1b" if gpu else "test-llama"),
                         batch_size=a.batch or 1,
                         prompt_len=a.prompt_len or (128 if gpu else 16),
                         output_len=a.output_len or (128 if gpu else 16),
                         precision=a.precision or ("bf16" if gpu else "fp32"), path=path,
                         fuse=a.fuse, fold_gqa=a.fold_gqa, device=a.device, warmup_requests=1, stop=stop)

    # Path compile: one compiled decode step for the whole process, run by both sides in every
    # round (SharedDecode), so that the rounds compare harnesses around the same kernels.
    shared = SharedDecode() if path == "compile" else None

    def bare(requests: int) -> float:
        # The first request (capture or compilation) and dlbench's warm-up, untimed, as there.
        return bare_generate(cfg.model, cfg.batch_size, cfg.prompt_len, cfg.output_len,
                             cfg.precision, path, device, 1 + cfg.warmup_requests, requests,
                             fuse=cfg.fuse, fold=cfg.fold_gqa, shared=shared)

    def ours() -> GenerateRecord:
        with shared.in_dlbench() if shared else contextlib.nullcontext():
            return generate_workload.measure(cfg, env)

    rounds = []
    requests = 0
    graphs = None  # dynamo's graph count after round 1 (path compile)
    for i in range(rounds_n):
        # Alternate which side goes first, as the training rounds do; round 1 runs dlbench
        # first, so the bare loop knows how many requests a window takes (and, with path
        # compile, dlbench's first request compiles the shared step).
        dlbench_first = i % 2 == 0
        if dlbench_first:
            rec = ours()
            requests = len(rec.step_times_s)
            theirs = bare(requests)
        else:
            theirs = bare(requests)
            rec = ours()
        tokens_per_s = rec.output_tokens_per_s()
        ratio = tokens_per_s / theirs
        rounds.append({"dlbench_first": dlbench_first, "requests": len(rec.step_times_s),
                       "bare_requests": requests, "dlbench": tokens_per_s, "bare": theirs,
                       "ratio": ratio})
        if shared:  # the process's compiled graphs so far: the same count in every round
            rounds[-1]["dynamo_graphs"] = dynamo_graphs()
        print(f"round {i + 1}: dlbench {tokens_per_s:.1f} tokens/s  bare {theirs:.1f} tokens/s  "
              f"ratio {ratio:.4f}  ({len(rec.step_times_s)} vs {requests} requests, "
              f"{'dlbench' if dlbench_first else 'bare'} first)", flush=True)
        if shared:
            graphs = rounds[-1]["dynamo_graphs"] if graphs is None else graphs
            if rounds[-1]["dynamo_graphs"] != graphs:
                raise SystemExit(f"round {i + 1}: the shared decode step was compiled again "
                                 f"({graphs} graphs after round 1, {rounds[-1]['dynamo_graphs']} "
                                 "now): its guards failed on this round's model or cache, and "
                                 "the rounds would compare compiles, not harnesses")
    return cfg, rounds


def bare_fsdp(model_name: str, batch: int, seq_len: int, precision: str, compile: str | None,
              checkpointing: bool, device_type: str, warmup: int, steps: int,
              compile_how: str = "forward", in_flight: int = 0) -> dict:
    """One rank of the FSDP2 loop a careful user would write by hand, run under torchrun.

    Returns this rank's view: tokens/s of all ranks over the slowest rank's timed steps (the
    same on every rank), the last loss, and the parameters as FSDP holds them.
    """
    import torch.distributed as dist  # heavy: distributed
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # heavy: distributed

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device_type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)  # the same initial weights on every rank, as dlbench's ranks have
    # The registry's module is the transformers model in a wrapper that returns the logits: the
    # loop uses the transformers model itself, built as dlbench builds it (its attention without
    # a mask to build: the same model, so that only the two loops differ).
    lm = get_model(model_name).build_on(device, seq_len).model
    if checkpointing:  # transformers' own switch, before sharding, as dlbench does
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = lm.model.layers if hasattr(lm, "model") else lm.transformer.h  # llama, gpt2
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if precision == "bf16" else None,
                                  reduce_dtype=torch.float32)
    for name, block in list(layers.named_children()):
        if compile and compile_how == "forward":  # each block's forward compiled, then sharded
            block.forward = torch.compile(block.forward, mode=compile)
        elif compile:  # the block wrapped in torch.compile's module (torchtitan's apply_compile)
            block = torch.compile(block, mode=compile)
            layers.register_module(name, block)
        fully_shard(block, mp_policy=policy)
    fully_shard(lm, mp_policy=policy)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-4)  # after sharding: it holds the shards
    vocab = lm.config.vocab_size
    # Each rank its own data, drawn as dlbench's ranks draw theirs (seed 0: the generator seeded
    # with the rank), so that both sides train on the same tokens and their losses compare.
    gen = torch.Generator(device).manual_seed(rank)
    x = torch.randint(0, vocab, (batch, seq_len), device=device, generator=gen)
    y = torch.randint(0, vocab, (batch, seq_len), device=device, generator=gen)
    if device.type == "cuda":  # the peak of training, not of the build (as dlbench's)
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = lm(input_ids=x).logits
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(1 + warmup):  # the first step (compilation, communicators), then warm-up
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    dist.barrier()  # every rank starts the clock together
    t = time.perf_counter()
    done = []
    for _ in range(steps):
        loss = step()
        if in_flight and device.type == "cuda":  # at most in_flight steps queued ahead
            done.append(torch.cuda.Event())
            done[-1].record()
            if len(done) > in_flight:
                done.pop(0).synchronize()
    sync()  # note: the one CPU-GPU sync point of the timed steps
    elapsed = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time, as dlbench's
    result = {"tokens_per_s": world * batch * seq_len * steps / float(elapsed),
              "elapsed_s": float(elapsed), "steps": steps, "warmup_steps": 1 + warmup,
              "world": world, "final_loss": float(loss.detach()),
              # FSDP's parameters are DTensors: numel() is the whole tensor's, the local
              # shard this rank's part of it.
              "params": sum(p.numel() for p in lm.parameters()),
              "local_params": sum(p.to_local().numel() for p in lm.parameters()),
              "sharded": all(type(p).__name__ == "DTensor" for p in lm.parameters()),
              "param_dtype": str(next(lm.parameters()).dtype).removeprefix("torch."),
              "allocated_peak_bytes": torch.cuda.max_memory_allocated(device)
              if device.type == "cuda" else None}
    dist.destroy_process_group()
    return result


def fsdp_rank(job_path: str) -> NoReturn:
    """The entry of one bare-loop rank (``fidelity.py --fsdp-rank JOB``, under torchrun):
    runs :func:`bare_fsdp` with the job's settings; rank 0 writes its result where the job
    says."""
    job = json.loads(Path(job_path).read_text())
    # dlbench's ranks run with these (workloads.throughput.precision_flags): true fp32, no TF32.
    torch.backends.cudnn.benchmark = job["device"] == "cuda"
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    out = bare_fsdp(job["model"], job["batch"], job["seq_len"], job["precision"], job["compile"],
                    job["checkpointing"], job["device"], job["warmup"], job["steps"],
                    job.get("bare_compile", "forward"), job.get("in_flight", 0))
    if os.environ["RANK"] == "0":
        Path(job["out"]).write_text(json.dumps(out))
    # The result is on disk: skip the interpreter's teardown, where a native thread pool torn
    # down now and then aborts the process ("terminate called without an active exception",
    # about one run in three with checkpointing on the CPU) and fails a finished job. dlbench's
    # ranks end the same way (dlbench.launch.rank_entry).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _child(cmd: list[str], env: dict, what: str, timeout_s: float,
           ok: tuple[int, ...] = (0,)) -> str:
    """Run ``cmd`` and return its stdout; another exit code than ``ok`` ends the script with
    the output's tail."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    if p.returncode not in ok:
        raise SystemExit(f"{what} failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout


def dlbench_fsdp(cfg: ScalingConfig, db: str, env: dict) -> dict:
    """``dlbench scale --strategy fsdp`` with ``cfg``'s settings, as a user runs it; its record
    (the JSON export)."""
    b, s = cfg.base, cfg.base.stop
    cmd = [sys.executable, "-m", "dlbench", "scale", "-m", b.model, "-b", str(b.batch_size),
           "--seq-len", str(b.input_size), "--gpus", str(cfg.gpus), "--strategy", "fsdp",
           "--precision", b.precision, "--optimizer", b.optimizer,
           "--compile", b.compile or "none", "--warmup", str(b.warmup_steps),
           "--warmup-time", str(b.warmup_seconds), "--min-steps", str(s.min_steps),
           "--min-time", str(s.min_seconds), "--max-time", str(s.max_seconds),
           "--target-ci", str(s.target_rel_ci), "--seed", str(b.seed),
           "--db", db, "--json", "--quiet"]
    cmd += ["--checkpointing"] * b.checkpointing + ["--device", "cpu"] * (b.device == "cpu")
    # Exit 3: the result is a failure row, whose error the record says.
    (rec,) = json.loads(_child(cmd, env, "dlbench scale", 1800, ok=(0, 3)))
    if rec["status"] != "ok":
        raise SystemExit(f"dlbench scale: {rec['error_type']}: {rec['error']}")
    return rec


def bare_fsdp_job(cfg: ScalingConfig, steps: int, tmp: str, env: dict,
                  compile_how: str = "forward", in_flight: int = 0) -> dict:
    """The bare FSDP2 loop on ``cfg.gpus`` ranks through torchrun; rank 0's result.
    ``compile_how``: each block's ``forward`` compiled (dlbench's way) or the block wrapped in
    ``torch.compile``'s module (``module``: torchtitan's ``apply_compile``)."""
    b = cfg.base
    out = Path(tmp) / "bare.json"
    out.unlink(missing_ok=True)
    job = Path(tmp) / "bare-job.json"
    job.write_text(json.dumps({
        "model": b.model, "batch": b.batch_size, "seq_len": b.input_size,
        "precision": b.precision, "compile": b.compile, "checkpointing": b.checkpointing,
        "device": "cpu" if b.device == "cpu" else "cuda", "warmup": b.warmup_steps,
        "steps": steps, "out": str(out), "bare_compile": compile_how,
        "in_flight": in_flight}))
    _child([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(cfg.gpus), str(Path(__file__).resolve()), "--fsdp-rank", str(job)],
           env, "the bare FSDP2 loop", 1800)
    return json.loads(out.read_text())


def fsdp_rounds(a: argparse.Namespace, gpu: bool, rounds_n: int
                ) -> tuple[ScalingConfig, list[dict]]:
    """--fsdp: alternate ``dlbench scale --strategy fsdp`` and the bare FSDP2 loop."""
    model = a.model or ("llama-3.2-1b" if gpu else "tiny_llama")
    spec = get_model(model)
    longest = a.max_time or (15.0 if gpu else 8.0)
    stop = StopRule(min_steps=30, min_seconds=min(3.0, longest), max_seconds=longest) if gpu \
        else StopRule(min_steps=30, min_seconds=min(2.0, longest), max_seconds=longest,
                      target_rel_ci=0.02)
    cfg = ScalingConfig(
        base=ThroughputConfig(model=spec.name,
                              batch_size=a.batch or (spec.default_batch if gpu else 4),
                              precision=a.precision or ("bf16" if gpu else "fp32"),
                              device="auto" if gpu else "cpu", optimizer="adamw",
                              input_size=a.seq_len or spec.input_size,
                              compile=None if a.compile == "none" else a.compile,
                              checkpointing=a.checkpointing, warmup_steps=10,
                              warmup_seconds=min(1.0, longest), stop=stop),
        gpus=a.gpus, strategy="fsdp")
    # Both jobs' ranks get what dlbench's launcher gives its ranks (launch.torchrun).
    env = {**os.environ, **interconnect_env(cfg.interconnect)}
    env["OMP_NUM_THREADS"] = str(a.threads) if a.threads else env.get("OMP_NUM_THREADS", "1")
    rounds = []
    steps = 0
    with tempfile.TemporaryDirectory(prefix="fidelity-fsdp-") as tmp:
        db = str(Path(tmp) / "dlbench.db")
        for i in range(rounds_n):
            # As the other modes: alternate which side goes first; round 1 runs dlbench first,
            # so the bare loop knows how many steps a window takes.
            dlbench_first = i % 2 == 0
            if dlbench_first:
                rec = dlbench_fsdp(cfg, db, env)
                steps = rec["summary"]["steps"]
                bare = bare_fsdp_job(cfg, steps, tmp, env, a.bare_compile, a.bare_in_flight)
            else:
                bare = bare_fsdp_job(cfg, steps, tmp, env, a.bare_compile, a.bare_in_flight)
                rec = dlbench_fsdp(cfg, db, env)
            ours = rec["summary"]["units_per_s"]
            ratio = ours / bare["tokens_per_s"]
            rounds.append({"dlbench_first": dlbench_first, "steps": rec["summary"]["steps"],
                           "bare_steps": steps, "dlbench": ours, "bare": bare["tokens_per_s"],
                           "ratio": ratio, "bare_compile": a.bare_compile,
                           "bare_in_flight": a.bare_in_flight,
                           "dlbench_final_loss": rec["final_loss"],
                           "dlbench_memory": rec["memory"], "bare_loop": bare})
            print(f"round {i + 1}: dlbench {ours:.1f} tokens/s  bare {bare['tokens_per_s']:.1f} "
                  f"tokens/s  ratio {ratio:.4f}  ({rec['summary']['steps']} vs {steps} steps, "
                  f"{'dlbench' if dlbench_first else 'bare'} first)", flush=True)
    return cfg, rounds


def verdict(mode: str, cfg: ThroughputConfig | GenerateConfig | ScalingConfig, env: dict,
            rounds: list[dict], device: torch.device, out: str | None,
            extra: dict | None = None) -> int:
    """Print the verdict on the median ratio (and write the JSON, with ``extra``'s keys after
    the config); 0 inside the band, else 1."""
    ratios = [r["ratio"] for r in rounds]
    med = statistics.median(ratios)
    LOW, HIGH = BANDS[device.type]
    ok = LOW <= med <= HIGH
    result = {"mode": mode, "config": cfg.to_dict(), **(extra or {}), "env": env,
              "rounds": rounds,
              "median_ratio": med, "min_ratio": min(ratios), "max_ratio": max(ratios),
              "band": [LOW, HIGH], "pass": ok}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    print(f"fidelity {cfg.label} on {envmod.device_label(env)}: median ratio dlbench/bare = "
          f"{med:.4f} (min {min(ratios):.4f}, max {max(ratios):.4f}) -> "
          f"{'PASS' if ok else 'FAIL'} [{LOW}, {HIGH}]")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp8"),
                    help="fp8: --generate only (an sm_89+ GPU and torchao)")
    ap.add_argument("--channels-last", choices=("on", "off"))
    ap.add_argument("--compile", choices=("none", "default", "max-autotune-no-cudagraphs"),
                    default="none", help="torch.compile both sides (tuned mode's path)")
    ap.add_argument("--cuda-graph", choices=("on", "off"), default="off",
                    help="capture both sides' whole step in a CUDA graph (tuned mode's path)")
    ap.add_argument("--optimizer-impl", choices=("default", "fused"), default="default")
    ap.add_argument("--rounds", type=int, default=None,
                    help="pairs of runs (default 4 on a GPU, 10 on the CPU, which is noisier)")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for torch (default 1 on the CPU: a shared machine's "
                         "second core makes OpenMP timings jump by tens of percent)")
    ap.add_argument("--out", help="write the full result as JSON here")
    ap.add_argument("--framework", choices=("torch", "jax"), default="torch",
                    help="jax: dlbench's JAX path (--framework jax) against a bare JAX loop")
    ap.add_argument("--generate", action="store_true",
                    help="LLM generation: dlbench's generate workload against a bare "
                         "generation loop (output tokens/s)")
    ap.add_argument("--path", choices=("eager", "static", "graph", "compile"),
                    help="--generate: how both sides decode (default graph on a GPU, static "
                         "on the CPU; compile: one decode step compiled once per process and "
                         "run by both sides in every round; eager: model.generate() on both "
                         "sides)")
    ap.add_argument("--fuse", action="store_true",
                    help="--generate: fuse each layer's q/k/v and gate/up projections on both "
                         "sides (dlbench generate --fuse; not with --path eager)")
    ap.add_argument("--fold-gqa", action="store_true",
                    help="--generate: fold grouped-query decode attention on both sides "
                         "(dlbench generate --fold-gqa; not with --path eager)")
    ap.add_argument("--prompt-len", type=int,
                    help="--generate: prompt tokens (default 128 on a GPU, 16 on the CPU)")
    ap.add_argument("--output-len", type=int,
                    help="--generate: generated tokens (default 128 on a GPU, 16 on the CPU)")
    ap.add_argument("--fsdp", action="store_true",
                    help="sharded training: dlbench scale --strategy fsdp against a bare FSDP2 "
                         "loop, both through torchrun (tokens/s of all ranks)")
    ap.add_argument("--gpus", type=int, default=2,
                    help="--fsdp: ranks, one per GPU (gloo processes on the CPU; default 2)")
    ap.add_argument("--seq-len", type=int,
                    help="--fsdp: tokens per sequence (default: the model's, 2048 for llama-*)")
    ap.add_argument("--bare-in-flight", type=int, default=0, metavar="K",
                    help="--fsdp on a GPU: the bare loop waits for step i-K before going on "
                         "after step i (a bounded launch queue, as dlbench's window keeps); "
                         "0 (default): unbounded, as a plain loop runs")
    ap.add_argument("--bare-compile", choices=("forward", "module"), default="forward",
                    help="--fsdp --compile: how the bare loop compiles each block: its forward "
                         "(default, as dlbench does) or the block wrapped in torch.compile's "
                         "module (module: torchtitan's way), to measure that choice apart")
    ap.add_argument("--checkpointing", action="store_true",
                    help="--fsdp: activation checkpointing on both sides (transformers' switch)")
    ap.add_argument("--max-time", type=float,
                    help="--fsdp: the longest dlbench window, seconds (default 15 on a GPU, 8 "
                         "on the CPU); the warm-up takes at most a second, and no longer than "
                         "this")
    ap.add_argument("--fsdp-rank", help=argparse.SUPPRESS)  # one rank of the bare loop
    a = ap.parse_args(argv)
    if a.fsdp_rank:
        return fsdp_rank(a.fsdp_rank)
    gpu = a.device.startswith("cuda")
    if a.fsdp:
        other = [flag for flag, given in (
            ("--generate", a.generate), ("--channels-last", a.channels_last is not None),
            ("--cuda-graph", a.cuda_graph != "off"),
            ("--optimizer-impl", a.optimizer_impl != "default"),
            ("--framework", a.framework != "torch")) if given]
        if other:
            ap.error(f"{', '.join(other)}: not with --fsdp, whose two sides are dlbench scale "
                     "--strategy fsdp and a bare FSDP2 loop (AdamW, eager or compiled blocks)")
        if a.gpus < 1:
            ap.error(f"--gpus must be >= 1, got {a.gpus}")
        if a.max_time is not None and a.max_time <= 0:
            ap.error(f"--max-time must be > 0, got {a.max_time}")
    elif a.gpus != 2 or a.seq_len or a.checkpointing or a.max_time:
        ap.error("--gpus, --seq-len, --checkpointing and --max-time go with --fsdp")
    if a.generate:
        training = [flag for flag, given in (
            ("--channels-last", a.channels_last is not None), ("--compile", a.compile != "none"),
            ("--cuda-graph", a.cuda_graph != "off"),
            ("--optimizer-impl", a.optimizer_impl != "default"),
            ("--framework", a.framework != "torch")) if given]
        if training:
            ap.error(f"{', '.join(training)}: options of the training loop; with --generate, "
                     "--path chooses how both sides decode")
        if a.path == "graph" and not gpu:
            ap.error("--path graph captures CUDA work: it needs a CUDA GPU; on the CPU use "
                     "--path static or compile")
        if (a.fuse or a.fold_gqa) and a.path == "eager":
            ap.error("--fuse and --fold-gqa change the model of the static-cache paths "
                     "(static, graph, compile); model.generate() runs the model as it is")
        if a.precision == "fp8":
            try:  # an sm_89+ GPU and torchao, before either side builds anything
                fp8_inference.check_ready(torch.device(a.device))
            except ConfigError as e:  # its fields, spelled as this script's flags
                ap.error(as_flags(e))
    elif a.precision == "fp8":
        ap.error("--precision fp8 goes with --generate (fp8 inference through torchao)")
    elif a.path or a.prompt_len or a.output_len or a.fuse or a.fold_gqa:
        ap.error("--path, --prompt-len, --output-len, --fuse and --fold-gqa go with --generate")
    device = torch.device(a.device)
    rounds_n = a.rounds or (4 if gpu else 10)
    if a.threads or not gpu:
        torch.set_num_threads(a.threads or 1)
    # Both sides get the same global settings: cuDNN autotuning, and no TF32 (bf16 does not use it).
    torch.backends.cudnn.benchmark = gpu
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if a.fsdp:  # the parent only starts jobs: the ranks set their own flags and threads
        env = envmod.capture_environment()  # with the GPUs' topology (NVLink), as scale's
        cfg, rounds = fsdp_rounds(a, gpu, rounds_n)
        return verdict("fsdp", cfg, env, rounds, device, a.out)
    env = envmod.capture_environment(include_topology=False)
    if a.generate:
        cfg, rounds = generate_rounds(a, gpu, device, rounds_n, env)
        # Path compile: the JSON says how the decode step was compiled (SharedDecode).
        extra = {"compile": SHARED_COMPILE} if cfg.path == "compile" else None
        return verdict("generate", cfg, env, rounds, device, a.out, extra)

    model = a.model or ("resnet50" if gpu else "tiny_cnn")
    batch = a.batch or (256 if gpu else 64)
    precision = a.precision or ("bf16" if gpu else "fp32")
    jax_side = a.framework == "jax"
    cl = (a.channels_last or ("on" if gpu and not jax_side else "off")) == "on"
    stop = StopRule(min_steps=30, min_seconds=3.0, max_seconds=15.0) if gpu else \
        StopRule(min_steps=30, min_seconds=2.0, max_seconds=8.0, target_rel_ci=0.02)
    compile = None if a.compile == "none" else a.compile
    graph, fused = a.cuda_graph == "on", a.optimizer_impl == "fused"
    cfg = ThroughputConfig(model=model, batch_size=batch, precision=precision, channels_last=cl,
                           device=a.device, warmup_steps=10, warmup_seconds=1.0, stop=stop,
                           compile=compile, cuda_graph=graph, optimizer_impl=a.optimizer_impl,
                           framework=a.framework)
    loop = bare_loop
    if jax_side:  # the same model, built in Flax, against the bare JAX loop
        def loop(model, batch, precision, cl, device, warmup, steps, **_):
            return bare_loop_jax(model, batch, precision, device.type, warmup, steps)
    techniques = dict(compile=compile, graph=graph, fused=fused)
    rounds = []
    steps = 0
    for i in range(rounds_n):
        # Alternate which side goes first, so a slow drift (clocks, heat) favours neither. Round 1
        # runs dlbench first, so the bare loop always knows how many steps a window takes.
        dlbench_first = i % 2 == 0
        if dlbench_first:
            rec = measure(cfg, env, flops=lambda *_: None)
            steps = rec.summary().steps
            bare = loop(model, batch, precision, cl, device, 10, steps, **techniques)
        else:
            bare = loop(model, batch, precision, cl, device, 10, steps, **techniques)
            rec = measure(cfg, env, flops=lambda *_: None)
        if compile:
            torch._dynamo.reset()  # the bare side's compiled graphs too, as dlbench frees its own
        ours = rec.summary().throughput
        ratio = ours / bare
        rounds.append({"dlbench_first": dlbench_first, "steps": rec.summary().steps,
                       "bare_steps": steps, "dlbench": ours, "bare": bare, "ratio": ratio})
        print(f"round {i + 1}: dlbench {ours:.1f}/s  bare {bare:.1f}/s  ratio {ratio:.4f}  "
              f"({rec.summary().steps} vs {steps} steps, {'dlbench' if dlbench_first else 'bare'} "
              "first)", flush=True)
    return verdict("throughput", cfg, env, rounds, device, a.out)


if __name__ == "__main__":
    sys.exit(main())
