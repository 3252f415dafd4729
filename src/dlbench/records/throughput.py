"""The ``throughput`` kind: one model at one batch, mode, precision and setting.

Times are in seconds. A record keeps the measured window's raw step times; the first step (which
holds ``torch.compile`` and autotuning) and the warm-up are kept apart and never enter the figure.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import (
    FRAMEWORKS,
    ATTENTION_BACKENDS,
    CHECKPOINT_POLICIES,
    COMPILE_MODES,
    DEVICES,
    METHODS,
    MODES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    ConfigError,
    choice,
)
from dlbench.measure.stats import Summary, summarize
from dlbench.measure.stopping import StopRule
from dlbench.records import compat
from dlbench.records.base import Record, StepRateMixin, asdict, config_key, known_fields


@dataclass(frozen=True)
class ThroughputConfig:
    """One throughput measurement: a model at one batch size, mode, precision and setting.

    Attributes:
        model: registry name (``dlbench models`` lists them).
        batch_size: samples per step on one device (``-b``).
        mode: ``train`` or ``eval`` (``--mode``).
        precision: fp32 (no TF32), tf32, fp16 (autocast + GradScaler), bf16 (autocast) (``--precision``).
        compile: None for eager, else a ``torch.compile`` mode (``--compile``).
        channels_last: NHWC memory format for image models (``--channels-last``).
        optimizer: ``sgd`` (momentum 0.9, as tf_cnn_benchmarks) or ``adamw`` (``--optimizer``).
        method: ``standard`` or ``fwd-bwd`` (``--method``): forward + ``out.sum().backward()``,
            no loss and no optimizer, as classic per-model ms-per-batch scripts time training.
            Its old name, in stores written before, is read as ``fwd-bwd``
            (:mod:`dlbench.records.compat`).
        input_size: image side or sequence length; None for the model's default (``--input-size``/``--seq-len``).
        device: ``auto``, ``cpu`` or ``cuda`` / ``cuda:N`` (``--device``).
        warmup_steps: untimed steps after the first (``--warmup``); the first step, which holds
            compilation and autotuning, is always timed apart.
        warmup_seconds: keep warming up until this much time has passed too (clocks ramp up).
        stop: when the measured window ends.
        seed: seed of the synthetic data and the weights.
        telemetry_interval_s: seconds between GPU/host telemetry samples taken on a thread beside
            the run (power, energy, clocks, throttling); None switches telemetry off. It does
            not change what is measured, so it is not part of the config's identity.
        checkpointing: activation checkpointing (``--checkpointing``): blocks keep only their
            inputs and recompute their activations in the backward pass, trading compute for
            memory (train only; models without a supported block structure are refused).
        checkpoint_policy: what checkpointed blocks recompute (``--checkpointing POLICY``):
            ``full``, everything; ``selective``, all but the outputs of their matmuls and
            attention, which are kept (more memory than full, less recompute).
        cuda_graph: capture the whole step (forward, loss, backward, optimizer step) in one CUDA
            graph over static input buffers and replay it (``--cuda-graph``): no per-kernel
            launch cost. The capture happens in the first step and is timed with it.
        optimizer_impl: ``default``, ``foreach`` or ``fused`` optimizer kernels (``--optimizer-impl``).
        attention: pin scaled-dot-product attention to one backend (``--attention``); None
            lets PyTorch choose.
        pad_vocab: language models only (``--pad-vocab``): the vocabulary padded to a multiple
            of 64 (gpt2's 50,257 to 50,304, as nanoGPT does) so the lm-head GEMMs' dimensions
            suit tensor cores. The padded rows are never a target; the FLOPs and MFU still
            count the unpadded model, the useful work.
        tuned_from: for tuned mode's pick (``--tuned``), the key of the plain config it is
            compared with (measured in the same run); None for any other config.
        autotune: cuDNN times its convolution algorithms on the first step of each new shape
            and keeps the fastest (``torch.backends.cudnn.benchmark``), as every serious CNN
            benchmark does. False (``--no-autotune``) lets cuDNN's heuristics pick: in true
            fp32 the timing runs every slow non-tensor-core algorithm and takes minutes per
            shape at large batches (a VGG-16 batch-512 probe ran past 300 s on an H200).
        compile_loss: with ``compile``, train only (``--compile-loss``): one compiled graph
            from the input to the loss rather than the model alone. The loss then never
            round-trips through memory in fp32: a language model's logits (gpt2 at batch 32:
            1.6 G values) are otherwise upcast, log-softmaxed and differentiated by separate
            eager kernels, each reading and writing the whole tensor.
        profile_steps: after the measured window, run this many more steps under
            torch.profiler and keep where their time went, kernel by kernel (``--profile``).
            Outside the window, so it changes no figure and is not part of the identity.
        framework: ``torch`` or ``jax`` (``--framework``): who builds and runs the step
            (:mod:`dlbench.frameworks`); the window, timer semantics and record are the same.
    """

    model: str
    batch_size: int
    mode: str = "train"
    precision: str = "fp32"
    compile: str | None = None
    channels_last: bool = False
    optimizer: str = "sgd"
    method: str = "standard"
    input_size: int | None = None
    device: str = "auto"
    warmup_steps: int = 10
    warmup_seconds: float = 1.0
    stop: StopRule = field(default_factory=StopRule)
    seed: int = 0
    telemetry_interval_s: float | None = 0.1
    checkpointing: bool = False
    cuda_graph: bool = False
    optimizer_impl: str = "default"
    attention: str | None = None
    pad_vocab: bool = False
    tuned_from: str | None = None
    autotune: bool = True
    compile_loss: bool = False
    profile_steps: int = 0
    framework: str = "torch"
    checkpoint_policy: str = "full"

    def __post_init__(self) -> None:
        if self.method in compat.METHODS:  # stored (or typed) under its old name
            object.__setattr__(self, "method", compat.current(compat.METHODS, self.method))
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}", "batch_size")
        choice("mode", self.mode, MODES)
        choice("precision", self.precision, PRECISIONS)
        choice("optimizer", self.optimizer, OPTIMIZERS)
        choice("method", self.method, METHODS)
        if self.compile is not None:
            choice("compile", self.compile, COMPILE_MODES)
        if self.input_size is not None and self.input_size < 1:
            raise ConfigError(f"input_size must be >= 1, got {self.input_size}", "input_size")
        if not (self.device in DEVICES or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}",
                              "device")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}",
                              "warmup_steps")
        if self.warmup_seconds < 0:
            raise ConfigError(f"warmup_seconds must be >= 0, got {self.warmup_seconds}",
                              "warmup_seconds")
        if self.profile_steps < 0:
            raise ConfigError(f"profile_steps must be >= 0 steps, got {self.profile_steps}",
                              "profile_steps")
        if self.telemetry_interval_s is not None and not self.telemetry_interval_s > 0:
            raise ConfigError(f"telemetry_interval_s must be > 0 s (None switches telemetry "
                              f"off); got {self.telemetry_interval_s}", "telemetry_interval_s")
        if self.checkpointing and self.mode != "train":
            raise ConfigError('checkpointing needs mode="train": eval keeps no activations for '
                              "a backward pass", "checkpointing")
        choice("checkpoint_policy", self.checkpoint_policy, CHECKPOINT_POLICIES)
        if self.checkpoint_policy != "full" and not self.checkpointing:
            raise ConfigError(f'checkpoint_policy="{self.checkpoint_policy}" needs '
                              "checkpointing=True: the policy says what checkpointed blocks "
                              "recompute", "checkpoint_policy")
        choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        if self.attention is not None:
            choice("attention", self.attention, ATTENTION_BACKENDS)
        if self.compile_loss and not self.compile:
            raise ConfigError("compile_loss needs compile: it widens the compiled graph from the "
                              "model to the model and its loss", "compile_loss", also=("compile",))
        if self.compile_loss and (self.mode != "train" or self.method != "standard"):
            raise ConfigError('compile_loss needs mode="train" with method="standard": only that '
                              "step computes a loss", "compile_loss")
        if self.cuda_graph:
            self._check_graph()
        choice("framework", self.framework, FRAMEWORKS)
        if self.framework != "torch":
            self._check_framework()

    def _check_framework(self) -> None:
        # PyTorch's levers have no JAX meaning: XLA always compiles the whole step, and its
        # layout, fusion and kernel choices are its own. A switch is named with the value that
        # turned it on (cuda_graph=True, autotune=False), a lever with a value by its name.
        levers = (("compile", self.compile is not None), ("compile_loss=True", self.compile_loss),
                  ("cuda_graph=True", self.cuda_graph),
                  ("channels_last=True", self.channels_last),
                  ("checkpointing=True", self.checkpointing),
                  ("attention", self.attention is not None), ("pad_vocab=True", self.pad_vocab),
                  ("profile_steps", self.profile_steps > 0),
                  ("optimizer_impl", self.optimizer_impl != "default"),
                  ("autotune=False", not self.autotune))
        used = [lever for lever, on in levers if on]
        if used:
            raise ConfigError(f'{", ".join(used)} with framework="{self.framework}": a PyTorch '
                              "lever; JAX's step is always jit-compiled by XLA, which picks "
                              'layout and kernels itself; drop it or use framework="torch"',
                              "framework", also=[u for u in used if "=" not in u])
        if self.precision not in ("fp32", "tf32", "bf16"):
            raise ConfigError(f'precision {self.precision} with framework="{self.framework}": '
                              "JAX has no loss scaling here; use bf16 (no scaling needed), tf32 "
                              "or fp32", "precision")

    def _check_graph(self) -> None:
        # GradScaler hands a fused optimizer its overflow flag as a tensor, and the fused
        # kernel skips the update on the device; any other optimizer has the flag read on the
        # host every step, a sync no capture can hold.
        if (self.mode == "train" and self.method == "standard" and self.precision == "fp16"
                and self.optimizer_impl != "fused"):
            raise ConfigError('cuda_graph with fp16 training needs optimizer_impl="fused": with '
                              "other optimizer kernels GradScaler reads its overflow flag on the "
                              'host every step; add optimizer_impl="fused" (or use bf16, which '
                              "needs no loss scaling)", "cuda_graph")
        if self.compile in ("reduce-overhead", "max-autotune"):
            raise ConfigError(f'cuda_graph with compile="{self.compile}": that compile mode '
                              'captures CUDA graphs itself; use compile="default" or '
                              'compile="max-autotune-no-cudagraphs" with cuda_graph=True',
                              "cuda_graph")
        if self.checkpointing:
            raise ConfigError("cuda_graph with checkpointing: recomputation saves and restores "
                              "the RNG state, which a graph capture forbids; pick one",
                              "cuda_graph", also=("checkpointing",))

    # Identity: what makes two measurements "the same config" (for --resume and comparisons).
    # The stopping rule and warm-up change how well a figure is known, not what it measures.
    _NOT_IDENTITY = ("stop", "warmup_steps", "warmup_seconds", "device", "telemetry_interval_s",
                     "profile_steps")
    _LATER_FIELDS = (("checkpointing", False), ("cuda_graph", False),
                     ("optimizer_impl", "default"), ("attention", None), ("pad_vocab", False),
                     ("tuned_from", None), ("autotune", True),
                     ("compile_loss", False), ("framework", "torch"),
                     ("checkpoint_policy", "full"))

    def key(self) -> str:
        ident = {k: v for k, v in self.to_dict().items() if k not in self._NOT_IDENTITY}
        # Keys are spelled as when the method had its old name, so --resume and comparisons
        # still match results stored before the rename.
        ident["method"] = compat.method_in_key(ident["method"])
        # A field at its default drops out: the key of a result stored before the field existed.
        for name, default in self._LATER_FIELDS:
            if ident[name] == default:
                del ident[name]
        blob = json.dumps(ident, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ThroughputConfig":
        d = dict(d)
        d["stop"] = StopRule(**d.get("stop", {}))
        known = known_fields(cls)
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def tuned(self) -> bool:
        return self.tuned_from is not None

    @property
    def compiled_as(self) -> str:
        """The compile cell of a table: ``eager``, the mode, and ``+loss`` where the loss is
        compiled with the model; ``jit`` for JAX, whose step XLA always compiles."""
        if self.framework != "torch":
            return "jit"
        if not self.compile:
            return "eager"
        return self.compile + ("+loss" if self.compile_loss else "")

    @property
    def label(self) -> str:
        """Short human name: ``resnet50 b256 bf16 train cl compiled``."""
        parts = [self.model, f"b{self.batch_size}", self.precision, self.mode]
        if self.input_size:
            parts.append(f"@{self.input_size}")
        if self.channels_last:
            parts.append("cl")
        if self.compile:
            parts.append(("compiled" if self.compile == "default" else f"compile={self.compile}")
                         + ("+loss" if self.compile_loss else ""))
        if self.method != "standard":
            parts.append(self.method)
        return " ".join(parts + self.setup_parts(with_graph=True))

    @property
    def checkpoint_label(self) -> str:
        """``ckpt`` (full), ``ckpt=selective``, or empty without checkpointing."""
        if not self.checkpointing:
            return ""
        return "ckpt" if self.checkpoint_policy == "full" else f"ckpt={self.checkpoint_policy}"

    def setup_parts(self, with_graph: bool = False) -> list[str]:
        """The label's words for the settings past model, batch, precision, mode, size, layout
        and compile (tables show those in columns, and these in a note)."""
        parts = []
        if self.optimizer != "sgd":
            parts.append(self.optimizer)
        if self.checkpointing:
            parts.append(self.checkpoint_label)
        if self.cuda_graph and with_graph:
            parts.append("graph")
        if self.optimizer_impl != "default":
            parts.append(f"{self.optimizer_impl}-opt")
        if self.attention:
            parts.append(f"attn={self.attention}")
        if self.pad_vocab:
            parts.append("pad-vocab")
        if self.tuned_from:
            parts.append("tuned")
        if not self.autotune:
            parts.append("no-autotune")
        if self.framework != "torch":
            parts.append(self.framework)
        return parts


class OnThroughputConfig:
    """For a config around a per-device :class:`ThroughputConfig` held as ``base`` (scaling,
    net): its model, identity, and serialisation with the base nested."""

    @property
    def model(self) -> str:
        return self.base.model

    def key(self) -> str:
        d = self.to_dict()
        d["base"] = self.base.key()
        return config_key(d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        d = dict(d)
        d["base"] = ThroughputConfig.from_dict(d["base"])
        known = known_fields(cls)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True, kw_only=True)
class ThroughputRecord(StepRateMixin, Record):
    """One throughput measurement (or its failure).

    Times are in seconds. ``step_times_s`` is the measured window only; the first step (which
    holds ``torch.compile`` and autotuning) and the warm-up are kept apart and never enter the
    throughput.
    """

    config_type: ClassVar[type] = ThroughputConfig
    kind: ClassVar[str] = "throughput"

    step_times_s: tuple[float, ...] = ()
    warmup_times_s: tuple[float, ...] = ()
    first_step_s: float | None = None            # includes compilation when compiled
    build_s: float | None = None                 # model build + move to device
    window_wall_s: float | None = None           # host clock across the window, one sync at its end
    stop_reason: str | None = None
    samples_per_step: int = 0
    unit: str = "samples"
    units_per_sample: int = 1
    flops_per_sample: int | None = None          # counted for this mode; optimizer not included
    memory: dict[str, int | None] = field(default_factory=dict)
    final_loss: float | None = None
    # GPU/host series over the run and their summary (dlbench.telemetry); None when off, and in
    # records stored before telemetry existed.
    telemetry: dict[str, Any] | None = None
    # fp16 training: GradScaler's loss scale at the window's start and end. Each overflow skips
    # an optimizer step and halves the scale, so a drop means cheaper, skipped steps were timed.
    loss_scale: tuple[float, float] | None = None
    # --profile: the steps profiled after the window and their kernels, each (name, calls,
    # seconds) summed over those steps (dlbench.measure.kernels); None when not profiled.
    profile: dict[str, Any] | None = None

    #: Memory keys the first JAX records used, read as PyTorch's (their "reserved" was the
    #: allocator's limit, not a peak, so it is dropped).
    _OLD_MEMORY_KEYS = {"peak_allocated": "allocated_peak_bytes", "allocated": "allocated_bytes",
                        "reserved": None}

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        if name == "memory" and isinstance(value, dict) and "peak_allocated" in value:
            value = {cls._OLD_MEMORY_KEYS.get(k, k): v for k, v in value.items()
                     if cls._OLD_MEMORY_KEYS.get(k, k)}
        return super()._decode(name, value)

    def summary(self) -> Summary | None:
        """Figures from the raw step times; None for a failed result."""
        if not self.ok or not self.step_times_s:
            return None
        return summarize(self.step_times_s, self.samples_per_step, self.config.stop.confidence)

    def skipped_steps(self) -> int | None:
        """At least this many optimizer steps of the window were skipped for overflow (fp16;
        None where no loss scaling ran). The scale only grows after 2,000 clean steps, so in
        a window shorter than that each halving is one skipped step."""
        if not self.loss_scale:
            return None
        start, end = self.loss_scale
        return max(0, round(math.log2(start / end))) if start > 0 and end > 0 else None

    def stop_rule(self):
        return self.config.stop
