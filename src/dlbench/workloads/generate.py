"""Generation: a decoder LM prefills a batch of prompts and generates a fixed number of tokens.

A request is ``batch_size`` random prompts of ``prompt_len`` tokens and ``output_len`` tokens
generated greedily for each, end-of-sequence ignored. Requests run through the one measured
window (:mod:`dlbench.measure.window`): the first apart (compilation, graph capture, autotuning),
a warm-up apart, then requests until the stopping rule is met. Inside each request a
:class:`~dlbench.measure.timer.TokenTimer` marks the prefill's end (the first token) and every
decode step, CUDA events read only after the window: nothing in the loop synchronises that
the path itself does not (``generate()``'s own per-token checks are part of what it costs).

The paths (:data:`dlbench.records.generate.PATHS`):

- ``eager``: ``model.generate()`` with transformers' defaults (dynamic cache, eager kernels);
- ``static``: dlbench's loop over a static KV cache: one eager prefill, then one forward per
  token, the next token chosen on the device (argmax), no host sync;
- ``graph``: the same decode step captured in one CUDA graph and replayed;
- ``compile``: the decode step compiled by ``torch.compile`` (fused kernels), then captured.

``--fuse`` (a lever of the static-cache paths) computes each layer's q/k/v projections and its
gate/up projections as one matmul each (:mod:`dlbench.workloads.fusion`).

``--precision fp8`` builds the model in bf16, then quantizes its linear layers (after fusion:
the fused weights are quantized as one) with torchao's dynamic fp8 recipe, or with
``--fp8-recipe weight-only`` its weight-only one (fp8 weights, bf16 inputs and matmuls;
:mod:`dlbench.workloads.fp8_inference`); the KV cache, attention, the embedding and the LM
head stay bf16. The bytes a decode step reads are counted on the built model's own tensors
(:func:`dlbench.models.lm.tensor_bytes`), so the roofline counts fp8 weights at one byte.

Measurement code prints nothing and writes nothing: it returns a record.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import psutil
import torch

from dlbench import telemetry
from dlbench.config import ConfigError
from dlbench.measure import generation as gen
from dlbench.measure.kernels import profile_steps
from dlbench.measure.memory import peak_memory, reset_peak_memory
from dlbench.measure.timer import TokenTimer, synchronize
from dlbench.measure.window import MeasuredWindow
from dlbench.models.lm import LmSpec, get_lm, lm_shape, meta_params, meta_shape, tensor_bytes
from dlbench.records.generate import GenerateConfig, GenerateRecord
from dlbench.workloads import fp8_inference
from dlbench.workloads.devices import UnsupportedError, resolve_device
from dlbench.workloads.fusion import fuse_projections
from dlbench.workloads.gqa_fold import fold_gqa
from dlbench.workloads.size_guard import ModelTooLargeError

#: The dtype each precision builds the model in (fp8 quantizes the bf16 model's linear layers).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8": torch.bfloat16}

#: Eager decode steps run before a capture (lazy state, compilation, autotuning happen there).
CAPTURE_WARMUP = 3


def check_supported(cfg: GenerateConfig, device: torch.device) -> None:
    """Raise :class:`UnsupportedError` if ``cfg`` cannot run on ``device``."""
    if cfg.precision == "fp8":  # an sm_89+ GPU, then torchao: before anything is built
        fp8_inference.check_ready(device)
    if cfg.path == "graph" and device.type != "cuda":
        raise UnsupportedError("path graph captures CUDA work: it needs a CUDA GPU; on the "
                               'CPU use path="static" or path="compile"', "path")
    if device.type == "cuda" and cfg.precision == "bf16" and \
            not torch.cuda.is_bf16_supported(including_emulation=False):
        raise UnsupportedError(f"precision bf16: {torch.cuda.get_device_name(device)} has no "
                               "native bf16; use fp16", "precision")
    if device.type == "cpu" and cfg.precision == "fp16":
        raise UnsupportedError("precision fp16 on the CPU: use bf16 or fp32", "precision")


def device_memory(device: torch.device) -> tuple[int, str]:
    """What a generation run may fill, and how to say it: the GPU's total memory, or on the CPU
    the host's memory available now (a model larger than that would grow until the kernel
    kills the process)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, "the GPU's memory"
    return psutil.virtual_memory().available, "the host's available memory"


def check_weights_fit(cfg: GenerateConfig, device: torch.device) -> None:
    """Refuse a model whose weights alone cannot fit, at any batch: :class:`ModelTooLargeError`
    (one line, exit 2 before anything is stored). Counted on the meta device, a deep stack from
    its first layers (:func:`~dlbench.models.lm.meta_params`), so ``hf:gpt2?n_layer=10000`` is
    refused in seconds; a factory's model is known only once built, and not checked."""
    params = meta_params(get_lm(cfg.model))
    if params is None:
        return
    total, where = device_memory(device)
    # The weights as built: fp8 quantizes a model built in bf16, which must fit first.
    need = params * gen.ACTIVATION_BYTES[cfg.precision]
    if need > total:
        lower = ' (or a 2-byte precision: precision="bf16")' if cfg.precision == "fp32" else ""
        held = ("bf16 weights alone (fp8 quantizes them once built)" if cfg.precision == "fp8"
                else f"{cfg.precision} weights alone")
        raise ModelTooLargeError(
            f"{cfg.model}: {params / 1e9:.3g} billion parameters need {need / 2**30:.1f} GiB for "
            f"their {held}, more than {where} ({total / 2**30:.1f} GiB); measure a smaller "
            f"model{lower}")


def check_fits(cfg: GenerateConfig, shape: Any, device: torch.device) -> None:
    """Refuse, in a second and with the sizes, a batch whose weights and KV cache cannot fit."""
    total, where = device_memory(device)
    need = (gen.model_weight_bytes(shape, cfg.precision)
            + gen.kv_cache_bytes(shape, cfg.precision, cfg.batch_size,
                                 cfg.prompt_len + cfg.output_len))
    if need > total:
        best = gen.largest_batch(shape, cfg.precision, cfg.prompt_len, cfg.output_len, total)
        auto = " (or the auto batch)" if device.type == "cuda" else ""
        hint = (f"a batch of {best} or less fits{auto}" if best else
                "not even its weights fit: a smaller model or another precision")
        raise torch.OutOfMemoryError(
            f"{cfg.label}: weights and KV cache need {need / 2**30:.1f} GiB, more than "
            f"{where} ({total / 2**30:.1f} GiB); {hint}")


@contextlib.contextmanager
def compiled_graphs_freed(cfg: GenerateConfig) -> Iterator[None]:
    """Drop compiled graphs after a compiled run: they hold memory, and the next model with
    the same forward code would count against dynamo's recompile limit."""
    try:
        yield
    finally:
        if cfg.path == "compile":
            torch._dynamo.reset()


def measure(cfg: GenerateConfig, env: dict, clock: Callable[[], float] = time.perf_counter,
            idle_baseline: bool = True, **_: Any) -> GenerateRecord:
    """Run one generation config and return its record. Raises on failure; the launchers turn
    that into a row."""
    device = resolve_device(cfg.device)
    check_supported(cfg, device)
    spec = get_lm(cfg.model)
    torch.manual_seed(cfg.seed)
    dtype = DTYPES[cfg.precision]
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # fp32 is IEEE fp32, never TF32
    try:
        with compiled_graphs_freed(cfg), torch.no_grad(), \
                telemetry.for_benchmark(cfg.telemetry_interval_s, device, env) as sampler:
            if idle_baseline:  # GPU power before anything runs: the baseline
                sampler.idle(telemetry.IDLE_BASELINE_S)
            return _measure(cfg, env, spec, device, dtype, clock, sampler)
    finally:
        torch.set_float32_matmul_precision(matmul)


def _measure(cfg: GenerateConfig, env: dict, spec: LmSpec, device: torch.device,
             dtype: torch.dtype, clock: Callable[[], float], sampler: Any) -> GenerateRecord:
    if spec.config is not None:  # a factory's shape is known only once it is built
        check_fits(cfg, meta_shape(spec), device)
    t = clock()
    model = spec.build_on(device, dtype)
    if cfg.fuse:
        fuse_projections(model)
    if cfg.fold_gqa:
        fold_gqa(model)
    if cfg.precision == "fp8":  # after fusion: a fused weight is quantized as one
        fp8_inference.quantize(model, cfg.fp8_recipe)
    synchronize(device)
    build_s = clock() - t
    shape = lm_shape(model, count_bytes=True)  # the weights as held: fp8 at a byte, + scales
    gen_ = torch.Generator(device="cpu").manual_seed(cfg.seed)
    prompt = torch.randint(0, shape.vocab, (cfg.batch_size, cfg.prompt_len), generator=gen_)
    prompt = prompt.to(device)
    tokens = TokenTimer(device, clock)
    reset_peak_memory(device)
    request, cache_bytes = make_request(cfg, model, prompt, tokens, device)

    window = MeasuredWindow(device, clock=clock, mark=sampler.mark)
    window.first_step(request)  # compilation and capture happen here, timed apart
    window.warm_up(request, cfg.warmup_requests, 0.0)
    tokens.clear()
    window.run(request, cfg.stop)  # ends with the window's one synchronize
    per_request = tokens.read()
    # After the window and its figures: the profiler's cost shows in none of them.
    profile = profile_steps(request, cfg.profile_requests, device) if cfg.profile_requests \
        else None
    memory = peak_memory(device)
    memory["weights_bytes"] = sum(tensor_bytes(p) for p in model.parameters())
    memory["kv_cache_bytes"] = cache_bytes()
    w = window.times()
    if len(per_request) != len(w.step_times_s) or any(
            len(r) != cfg.output_len for r in per_request):
        raise RuntimeError(f"{cfg.label}: the token marks do not match the requests "
                           f"({len(per_request)} requests marked, {len(w.step_times_s)} timed)")
    output_tokens = cfg.batch_size * cfg.output_len
    return GenerateRecord(
        config=cfg, env=env, step_times_s=w.step_times_s,
        ttft_s=tuple(r[0] for r in per_request),
        decode_s=tuple(tuple(r[1:]) for r in per_request),
        warmup_times_s=w.warmup_times_s, first_step_s=w.first_step_s, build_s=build_s,
        window_wall_s=w.wall_s, stop_reason=w.stop_reason, samples_per_step=output_tokens,
        shape=shape.to_dict(), memory=memory, profile=profile,
        telemetry=telemetry.finish(sampler.stop(), len(w.step_times_s) * output_tokens),
    )


def make_request(cfg: GenerateConfig, model: Any, prompt: torch.Tensor, tokens: TokenTimer,
                 device: torch.device) -> tuple[Callable[[], None], Callable[[], int]]:
    """The function one request calls, and one that tells the bytes of its KV cache (after a
    request: a static cache is allocated by its first update)."""
    if cfg.path == "eager":
        # The dynamic cache ends a request holding every position of every sequence.
        kv_bytes = gen.kv_cache_bytes(lm_shape(model), cfg.precision, cfg.batch_size,
                                      cfg.prompt_len + cfg.output_len)
        return eager_request(cfg, model, prompt, tokens), lambda: kv_bytes
    loop = StaticLoop(cfg, model, prompt, device)
    return loop.request(tokens), loop.cache_bytes


def eager_request(cfg: GenerateConfig, model: Any, prompt: torch.Tensor,
                  tokens: TokenTimer) -> Callable[[], None]:
    """``model.generate()`` as a user calls it (the same keyword arguments), a token mark from a
    forward hook on the model: ``generate()`` calls the model once per token, and the mark
    follows the forward that produced that token's logits.

    A hook, not a logits processor or a ``GenerationConfig``: transformers inspects every
    logits processor's signature on every token, and copies and validates a passed config on
    every call; on a CPU, where a tiny model's token costs well under a millisecond of host
    work, those two made ``generate()`` through dlbench 11% slower than called bare
    (``benchmarks/fidelity.py --generate --path eager``). A module hook costs a call.
    """
    mask = torch.ones_like(prompt)
    model.register_forward_hook(lambda *_: tokens.mark())

    def request() -> None:
        tokens.begin()
        model.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=cfg.output_len,
                       min_new_tokens=cfg.output_len, do_sample=False, eos_token_id=None,
                       pad_token_id=0)
    return request


class StaticLoop:
    """dlbench's decode loop over a static KV cache: prefill, then one forward per token.

    The next token is chosen on the device and written into the step's static input buffer,
    and the position advances on the device too, so a step needs nothing from the host and
    can be captured in a CUDA graph. The cache is rewound (its fill counters zeroed, nothing
    else) before each prefill: positions past the fill are masked, so stale entries are never
    read.
    """

    def __init__(self, cfg: GenerateConfig, model: Any, prompt: torch.Tensor,
                 device: torch.device) -> None:
        from transformers import StaticCache  # heavy: transformers
        self.cfg, self.model, self.prompt, self.device = cfg, model, prompt, device
        b, p = prompt.shape
        # The capture's warm-up steps run past the request's last position: room for them.
        length = p + cfg.output_len + CAPTURE_WARMUP
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.token = torch.zeros((b, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.prompt_positions = torch.arange(p, device=device).unsqueeze(0)
        self.step: Callable[[], None] | None = None

    def cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.cache.layers
                   for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                   if isinstance(t, torch.Tensor))

    def _rewind(self) -> None:
        for layer in self.cache.layers:
            fill = getattr(layer, "cumulative_length", None)
            if isinstance(fill, torch.Tensor):
                fill.zero_()
            elif getattr(layer, "is_initialized", False):
                layer.reset()

    def prefill(self) -> None:
        self._rewind()
        out = self.model(input_ids=self.prompt, position_ids=self.prompt_positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.token.copy_(out.logits[:, -1:].argmax(-1))
        self.position.fill_(self.prompt.shape[1])

    def decode(self) -> None:
        out = self.model(input_ids=self.token, position_ids=self.position,
                         past_key_values=self.cache, use_cache=True)
        self.token.copy_(out.logits[:, -1:].argmax(-1))
        self.position.add_(1)

    def _prepare(self) -> Callable[[], None]:
        """The decode step of this path; for graph and compile, captured after a prefill and a
        few eager (or compiling) steps on a side stream, as PyTorch's CUDA-graph notes say."""
        path = self.cfg.path
        step = self.decode
        if path == "compile":
            step = torch.compile(self.decode, fullgraph=True, dynamic=False)
        if path == "static" or self.device.type != "cuda":
            return step
        self.prefill()  # the cache is allocated (lazily, by its first update) outside the graph
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        # Compilation happens at the first call. Coordinate-descent tuning of inductor's kernels
        # (as gpt-fast sets it) doubles the compile time and pays for it: at batch 1 it turns
        # the matrix-vector products into tuned Triton reductions, 7% faster per token for
        # llama-3.1-8b and 25% for llama-3.2-1b on an H100 (docs/generation.md).
        with torch.cuda.stream(side), _inductor_tuning(path == "compile"):
            for _ in range(CAPTURE_WARMUP):
                step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        self._graph = graph  # kept alive with the loop
        return graph.replay

    def request(self, tokens: TokenTimer) -> Callable[[], None]:
        n = self.cfg.output_len

        def request() -> None:
            if self.step is None:  # the first request: compile and capture, timed with it
                self.step = self._prepare()
            step = self.step
            tokens.begin()
            self.prefill()
            tokens.mark()  # the first token is ready
            for _ in range(n - 1):
                step()
                tokens.mark()
        return request


@contextlib.contextmanager
def _inductor_tuning(on: bool) -> Iterator[None]:
    if not on:
        yield
        return
    import torch._inductor.config as inductor  # heavy: only when compiling
    with inductor.patch(coordinate_descent_tuning=True):
        yield


def resolve_auto_batch(cfg_model: str, precision: str, prompt_len: int, output_len: int,
                       device: torch.device) -> int:
    """``-b auto``: the largest batch whose weights, KV cache and prefill fit the GPU's memory
    (:func:`dlbench.measure.generation.largest_batch`); 1 on the CPU, where memory is the
    host's and the batch sweep is the user's to choose."""
    if device.type != "cuda":
        return 1
    spec = get_lm(cfg_model)
    shape = meta_shape(spec)
    intermediate = getattr(spec.config, "intermediate_size", None) if spec.config else None
    total = torch.cuda.get_device_properties(device).total_memory
    best = gen.largest_batch(shape, precision, prompt_len, output_len, total, intermediate)
    if best < 1:
        raise ConfigError(f'batch_size="auto": {cfg_model} in {precision} does not fit '
                          f"{total / 2**30:.0f} GiB with a {prompt_len}+{output_len} sequence",
                          "batch_size")
    return best
