"""The ``generate`` kind: a decoder LM generating a fixed number of tokens for a batch of prompts.

One *request* is a batch of ``batch_size`` prompts of ``prompt_len`` random tokens, prefilled,
then ``output_len`` tokens generated greedily, end-of-sequence ignored (as vLLM's and
TensorRT-LLM's benchmarks do with random data), so random weights time the same work as trained
ones. The measured window is a run of requests, the first apart (it holds compilation and
graph capture) and a warm-up apart; a record keeps, for every measured request, its time to
first token and every decode step's time, from which every figure is computed.

Times are in seconds.
"""

from __future__ import annotations

import json
import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import ConfigError, DEVICES, choice
from dlbench.measure import generation as gen
from dlbench.measure.stats import Summary, summarize
from dlbench.measure.stopping import StopRule
from dlbench.records.base import Record, StepRateMixin, asdict, known_fields

#: How the tokens are generated (``--path``).
#: eager   - ``model.generate()`` as a user calls it: transformers' default dynamic KV cache,
#:           eager kernels, its per-token host work;
#: static  - dlbench's decode loop over a static (preallocated) KV cache, eager kernels;
#: graph   - static, with each decode step captured once in a CUDA graph and replayed;
#: compile - static, with the decode step compiled by torch.compile (fused kernels) and then
#:           captured in a CUDA graph.
PATHS = ("eager", "static", "graph", "compile")
#: The paths a ``--tuned`` sweep measures: what a user gets, and the fastest setup.
TUNED_PATHS = ("eager", "compile")
#: The precisions (``--precision``). fp8 needs an sm_89+ GPU and torchao: the linear layers'
#: weights (and, with the dynamic recipe, their inputs) in fp8 e4m3, the rest in bf16
#: (:mod:`dlbench.workloads.fp8_inference`).
GENERATE_PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
#: How ``--precision fp8`` quantizes the linear layers (``--fp8-recipe``; the first is the
#: default).
#: dynamic     - fp8 weights and inputs (each input quantized per token at every call): one
#:               fp8 matmul per layer, torchao's H100 inference recipe;
#: weight-only - fp8 weights, bf16 inputs: each weight dequantized into a bf16 matmul, the
#:               batch-1 decode recipe (a byte per weight read, no activation quantization).
FP8_RECIPES = ("dynamic", "weight-only")
#: How a label names each recipe's precision (``fp8``, ``fp8-wo``).
FP8_LABELS = {"dynamic": "fp8", "weight-only": "fp8-wo"}

#: The window of a generation benchmark: a request is seconds long, so fewer of them than the
#: steps of a training window, and a longer cap.
GENERATE_STOP = StopRule(min_steps=3, min_seconds=2.0, max_seconds=60.0, max_steps=10_000)


@dataclass(frozen=True)
class GenerateConfig:
    """One generation benchmark.

    Attributes:
        model: a shipped architecture (``dlbench generate --list-models``), ``hf:NAME_OR_DIR``
            or ``FILE.py:FUNC`` (``-m``).
        batch_size: prompts generated together (``-b``).
        prompt_len: tokens of each prompt (``--prompt-len``).
        output_len: tokens generated for each prompt, end-of-sequence ignored (``--output-len``).
        precision: the weights', KV cache's and activations' type (``--precision``): bf16,
            fp16, fp32 (IEEE, no TF32) or fp8 (the linear layers' weights in fp8 e4m3 with
            per-row scales through torchao, their inputs quantized to fp8 per token or left
            bf16 as ``fp8_recipe`` says; the embedding, the LM head, attention and the KV
            cache in bf16; an sm_89+ GPU).
        fp8_recipe: how fp8 quantizes the linear layers (``--fp8-recipe``; see
            :data:`FP8_RECIPES`): ``dynamic`` (the default: fp8 weights and inputs, fp8
            matmuls) or ``weight-only`` (fp8 weights, bf16 inputs and matmuls); only with
            precision fp8. In the identity only when not the default, so records made before
            it existed keep their keys.
        path: ``eager``, ``static``, ``graph`` or ``compile`` (``--path``; see :data:`PATHS`).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (``--device``).
        warmup_requests: untimed requests after the first (``--warmup``).
        stop: when the window of requests ends (``--min-requests``, ``--max-time``...).
        seed: seed of the weights and the prompts.
        telemetry_interval_s: seconds between GPU telemetry samples; None switches it off.
        profile_requests: after the window, run this many more requests under torch.profiler
            and keep where their time went, kernel by kernel (``--profile``). Outside the
            window, so it changes no figure and is not part of the identity.
        fuse: each layer's sibling projections (q/k/v; gate/up) computed as one matmul each
            (``--fuse``; :mod:`dlbench.workloads.fusion`), on the static-cache paths. Part of
            the identity only when on, so records made before it existed keep their keys.
        fold_gqa: decode attention of a grouped-query model with each key/value head's
            query heads as one block, reading the KV cache once instead of copying it per
            query head (``--fold-gqa``; :mod:`dlbench.workloads.gqa_fold`), on the
            static-cache paths. In the identity only when on, as ``fuse``.
    """

    model: str
    batch_size: int
    prompt_len: int = 128
    output_len: int = 128
    precision: str = "bf16"
    path: str = "eager"
    device: str = "auto"
    warmup_requests: int = 1
    stop: StopRule = field(default_factory=lambda: GENERATE_STOP)
    seed: int = 0
    telemetry_interval_s: float | None = 0.1
    profile_requests: int = 0
    fuse: bool = False
    fold_gqa: bool = False
    fp8_recipe: str = "dynamic"

    #: Read by the launcher (which interpreter starts a worker) and by listings.
    framework: ClassVar[str] = "torch"
    mode: ClassVar[str] = "generate"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}", "batch_size")
        if self.prompt_len < 1:
            raise ConfigError(f"prompt_len must be >= 1 token, got {self.prompt_len}",
                              "prompt_len")
        if self.output_len < 2:
            raise ConfigError(f"output_len must be >= 2 tokens (the first comes from the "
                              f"prefill, the rest from decode steps), got {self.output_len}",
                              "output_len")
        choice("precision", self.precision, GENERATE_PRECISIONS)
        choice("path", self.path, PATHS)
        choice("fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        if self.fp8_recipe != FP8_RECIPES[0] and self.precision != "fp8":
            raise ConfigError(f"fp8_recipe {self.fp8_recipe} applies to precision fp8 "
                              f"only, not {self.precision}", "fp8_recipe", also=("precision",))
        if not (self.device in DEVICES or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}",
                              "device")
        if self.warmup_requests < 0:
            raise ConfigError(f"warmup_requests must be >= 0 requests, got "
                              f"{self.warmup_requests}", "warmup_requests")
        if self.telemetry_interval_s is not None and not self.telemetry_interval_s > 0:
            raise ConfigError(f"telemetry_interval_s must be > 0 s (None switches telemetry "
                              f"off); got {self.telemetry_interval_s}", "telemetry_interval_s")
        if self.profile_requests < 0:
            raise ConfigError(f"profile_requests must be >= 0 requests, got "
                              f"{self.profile_requests}", "profile_requests")
        if self.fuse and self.path == "eager":
            raise ConfigError("fuse applies to dlbench's static-cache paths (static, graph, "
                              "compile); eager is model.generate() as a user calls it", "fuse")
        if self.fold_gqa and self.path == "eager":
            raise ConfigError("fold_gqa applies to dlbench's static-cache paths (static, "
                              "graph, compile); eager is model.generate() as a user calls it",
                              "fold_gqa")

    _NOT_IDENTITY = ("stop", "warmup_requests", "device", "telemetry_interval_s",
                     "profile_requests")

    def _identity(self) -> dict[str, Any]:
        ident = {k: v for k, v in self.to_dict().items() if k not in self._NOT_IDENTITY}
        for lever in ("fuse", "fold_gqa"):
            if not ident[lever]:
                del ident[lever]
        if ident["fp8_recipe"] == FP8_RECIPES[0]:
            del ident["fp8_recipe"]
        return ident

    def key(self) -> str:
        ident = self._identity()
        return hashlib.sha256(b"generate" + json.dumps(ident, sort_keys=True).encode()
                              ).hexdigest()[:16]

    def pair_key(self) -> str:
        """The identity without the path and its levers: configs that differ only in how they
        generate."""
        ident = {k: v for k, v in self._identity().items()
                 if k not in ("path", "fuse", "fold_gqa")}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GenerateConfig":
        d = dict(d)
        if "stop" in d:
            d["stop"] = StopRule(**d["stop"])
        known = known_fields(cls)
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def tokens_label(self) -> str:
        return f"{self.prompt_len}+{self.output_len}"

    @property
    def label(self) -> str:
        """``llama-3.1-8b b1 bf16 128+128 compile``; weight-only fp8 ``... b1 fp8-wo ...``."""
        return (f"{self.model} b{self.batch_size} {self.precision_label} {self.tokens_label} "
                f"{self.path_label}")

    @property
    def precision_label(self) -> str:
        """The precision and fp8's recipe: ``bf16``, ``fp8`` (dynamic), ``fp8-wo``
        (weight-only)."""
        return FP8_LABELS[self.fp8_recipe] if self.precision == "fp8" else self.precision

    @property
    def matmul_precision(self) -> str:
        """The element type the linear layers' matmuls run in, whose peak a prefill's MFU is
        against: the precision, but bf16 for weight-only fp8 (its weights are dequantized into
        a bf16 matmul)."""
        weight_only = self.precision == "fp8" and self.fp8_recipe == "weight-only"
        return "bf16" if weight_only else self.precision

    @property
    def path_label(self) -> str:
        """The path and its levers: ``compile``, ``compile+fuse``, ``compile+fuse+fold``."""
        return self.path + ("+fuse" if self.fuse else "") + ("+fold" if self.fold_gqa else "")


@dataclass(frozen=True, kw_only=True)
class GenerateRecord(StepRateMixin, Record):
    """One generation benchmark (or its failure).

    ``step_times_s`` are the measured requests' end-to-end times (the window's steps), so the
    headline is output tokens per second over the window, with its interval; ``ttft_s`` and
    ``decode_s`` split each request into its prefill (time to first token) and its decode steps.
    """

    config_type: ClassVar[type] = GenerateConfig
    kind: ClassVar[str] = "generate"

    step_times_s: tuple[float, ...] = ()          # each measured request, end to end
    ttft_s: tuple[float, ...] = ()                # each measured request's time to first token
    decode_s: tuple[tuple[float, ...], ...] = ()  # each measured request's decode steps
    warmup_times_s: tuple[float, ...] = ()
    first_step_s: float | None = None             # the first request: compile, capture, autotune
    build_s: float | None = None                  # model build on the device (+ load of weights)
    window_wall_s: float | None = None
    stop_reason: str | None = None
    samples_per_step: int = 0                     # output tokens per request
    unit: str = "tokens"
    units_per_sample: int = 1
    flops_per_sample: int | None = None           # unused: see prefill_tflops()
    shape: dict[str, Any] = field(default_factory=dict)  # dlbench.models.lm.LmShape
    memory: dict[str, int | None] = field(default_factory=dict)
    telemetry: dict[str, Any] | None = None
    # --profile: the requests profiled after the window and their kernels, each (name, calls,
    # seconds) summed over those requests (dlbench.measure.kernels); None when not profiled.
    profile: dict[str, Any] | None = None

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        if name in ("shape", "memory", "telemetry", "profile"):
            return value
        return super()._decode(name, value)

    def stop_rule(self) -> StopRule:
        return self.config.stop

    def summary(self) -> Summary | None:
        """Output tokens per second over the measured requests, with its interval."""
        if not self.ok or not self.step_times_s:
            return None
        return summarize(self.step_times_s, self.samples_per_step, self.config.stop.confidence)

    # -- figures, all from the raw times -------------------------------------------------------
    def _shape(self) -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(**self.shape) if self.shape else None

    def decode_times(self) -> list[float]:
        """Every measured decode step's time, request after request."""
        return [t for request in self.decode_s for t in request]

    def ttft(self) -> gen.Latency | None:
        """Time to first token over the measured requests (prefill and the first token)."""
        return gen.latency(list(self.ttft_s)) if self.ok else None

    def tpot(self) -> gen.Latency | None:
        """Time per output token over every measured decode step. In a batch generated in
        lockstep each step gives every sequence its next token, so a step's time is both the
        inter-token latency of each sequence and its time per output token."""
        return gen.latency(self.decode_times()) if self.ok else None

    def e2e(self) -> gen.Latency | None:
        """End-to-end latency of a request over the measured requests."""
        return gen.latency(list(self.step_times_s)) if self.ok else None

    def output_tokens_per_s(self) -> float | None:
        s = self.summary()
        return None if s is None else s.throughput

    def total_tokens_per_s(self) -> float | None:
        """Prompt and output tokens over the window's time (vLLM's "total token throughput")."""
        s = self.summary()
        if s is None:
            return None
        c = self.config
        return c.batch_size * (c.prompt_len + c.output_len) * s.steps / s.total_s

    def decode_tokens_per_s(self) -> float | None:
        """Tokens per second of the decode phase alone: batch over the mean decode step."""
        t = self.tpot()
        return None if t is None else self.config.batch_size / t.mean_s

    def prefill_tokens_per_s(self) -> float | None:
        t = self.ttft()
        return None if t is None else self.config.batch_size * self.config.prompt_len / t.mean_s

    def prefill_tflops(self) -> float | None:
        """Counted prefill FLOPs over the mean time to first token (TFLOP/s)."""
        t, shape = self.ttft(), self._shape()
        if t is None or shape is None:
            return None
        c = self.config
        return gen.prefill_flops(shape, c.batch_size, c.prompt_len) / t.mean_s / 1e12

    def decode_bytes_per_step(self) -> float | None:
        """Mean bytes a decode step must read: the weights as the built model held them (fp8:
        a byte each, plus scales; older records, without the count: the precision's bytes per
        parameter), and the KV cache it attends to (:mod:`dlbench.measure.generation`)."""
        shape = self._shape()
        if shape is None:
            return None
        c = self.config
        return gen.decode_bytes_per_step(shape, c.precision, c.batch_size, c.prompt_len,
                                         c.output_len)

    def decode_gbs(self) -> float | None:
        """Bytes a decode step must read over its mean time (GB/s): the bandwidth it achieved."""
        t, nbytes = self.tpot(), self.decode_bytes_per_step()
        if t is None or nbytes is None:
            return None
        return nbytes / t.mean_s / 1e9

    def roofline_fraction(self, bandwidth_gbs: float | None) -> float | None:
        """The decode steps' achieved bandwidth over ``bandwidth_gbs`` (the memory roof)."""
        got = self.decode_gbs()
        if got is None or not bandwidth_gbs:
            return None
        return got / bandwidth_gbs

    def _energy(self) -> dict[str, Any]:
        return ((self.telemetry or {}).get("summary") or {}).get("total") or {}

    def energy_per_output_token_j(self) -> float | None:
        """Joules per output token over the window: the card's energy over the measured
        requests (prefill included) over their output tokens."""
        return self._energy().get("j_per_sample")

    def net_energy_per_output_token_j(self) -> float | None:
        """The same above the card's idle power (measured before the model was built)."""
        return self._energy().get("net_j_per_sample")

    def idle_power_w(self) -> float | None:
        return self._energy().get("idle_power_w")
