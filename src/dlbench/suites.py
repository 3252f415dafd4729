"""Named suites: the sets of configs that ``dlbench run --suite NAME`` measures.

A suite is built for the device that is there (bf16 where the GPU has it, else fp16; a CPU-sized
set on a machine without a GPU), so ``dlbench run`` needs no flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from dlbench.config import ConfigError
from dlbench.measure.stopping import StopRule
from dlbench.records import compat
from dlbench.records.throughput import ThroughputConfig

# The six CNNs of the 2020 tf_cnn_benchmarks study (4x Quadro RTX 8000, NVLink on and off).
CLASSIC_CNN_MODELS = ("resnet50", "inception_v3", "nasnet", "vgg16", "resnet152", "inception_v4")
MODERN_MODELS = ("vit_b_16", "bert-base", "gpt2")
# The three networks of the classic per-model ms-per-batch scripts (u39kun/deep-learning-benchmark).
MS_PER_BATCH_MODELS = ("vgg16", "resnet152", "densenet161")

# Per-GPU batch sizes for the classic-CNN table. The tf_cnn_benchmarks study's fp16 runs used
# 1024 for ResNet-50 and 512 for the rest on 48 GB cards (TensorFlow); with PyTorch on an 80 GB
# card these are the sizes that fit with room to spare. fp32 runs use half, as its fp32 table did.
CLASSIC_CNN_FP16_BATCH = {"resnet50": 512, "inception_v3": 256, "nasnet": 32, "vgg16": 256,
                          "resnet152": 256, "inception_v4": 256}

# GPU windows: long enough for a 1% interval on a steady GPU, short enough that the default
# sweeps finish in a few minutes.
GPU_STOP = StopRule(min_steps=20, min_seconds=2.0, max_seconds=12.0, target_rel_ci=0.01)
# Sweeps with many configs (classic-cnn: 24) trade a little precision for time.
SWEEP_STOP = StopRule(min_steps=10, min_seconds=1.5, max_seconds=8.0, target_rel_ci=0.01)
# The default suite runs each config in REPEAT fresh processes (--repeat), so that every figure
# comes with the spread across processes (cuDNN's autotuning picks, allocator state and clocks
# differ between processes; one process's interval cannot show that). Its windows are shorter
# than GPU_STOP's: the figure's uncertainty is now the spread across processes, and a window of
# 12 steps (about 3 s at the suite's batches) still gives a within-process interval. Warm-up
# is 5 steps and at least 1 s.
DEFAULT_REPEAT = 3
REPEAT_STOP = StopRule(min_steps=12, min_seconds=1.5, max_seconds=8.0, target_rel_ci=0.01)
# CPU windows, for the cpu suite's promise: a 95% interval of at most 5% (the target) in about
# two minutes on 2 cores. A short window's interval narrows with its step count: the
# effective-sample-size interval's degrees of freedom grow with the steps and shrink with any
# drift (5 to 19 steps of 0.4-1.4 s gave +-1-4.4% on two idle cores, +-4% to +-694% with
# another job running; 20 steps of 0.5 s with a 3% spread, +-4.3%). So the suite's configs
# take 0.1-0.55 s a step on two idle cores and each window runs at least 10 s, 50-100 steps of
# an image model. The language models' steps are the slowest (a 110-124M-parameter optimizer
# step at any batch), so their windows run at least 18 s, 33-45 steps.
# The caps hold the suite near two minutes on a shared machine. There a core taken by another
# job makes a 2-thread step 10 times slower or more, and steps can shift by 10-15% for seconds
# at a time; such a window stops at its cap, flagged noisy (time_cap), with the interval its
# steps gave. The minimum of 10 steps only matters then (an idle window has 20 or more by its
# minimum time): 20 held a window of 3 s steps for 60 s.
CPU_STOP = StopRule(min_steps=10, min_seconds=10.0, max_seconds=20.0, target_rel_ci=0.05)
CPU_LM_STOP = StopRule(min_steps=10, min_seconds=18.0, max_seconds=25.0, target_rel_ci=0.05)
# The cpu suite's image side (a multiple of ViT-B/16's 16-pixel patch) and sequence length.
CPU_IMAGE_SIZE = 112
CPU_SEQ_LEN = 64


@dataclass(frozen=True)
class DeviceFacts:
    """What a suite needs to know about the device it is built for."""

    cuda: bool
    bf16: bool
    memory_bytes: int | None = None   # device memory of the GPU, for sizing batches

    @property
    def mixed(self) -> str:
        """The mixed precision this device does best: bf16 where it has it, else fp16."""
        return "bf16" if self.bf16 else "fp16"


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    build: Callable[[DeviceFacts], list[ThroughputConfig]]
    view: str = "throughput"   # which table the terminal prints: one of VIEWS
    gpu_only: bool = False
    # Fresh processes per config (``dlbench run --repeat`` overrides it). 1: each figure comes
    # from one process, and the tables say so.
    repeat: int = 1


# The card the models' default batches were sized on (H100 80GB HBM3: 81,559 MiB).
REFERENCE_MEMORY_BYTES = 81_559 * 2**20


def gpu_batch(model: str, memory_bytes: int | None = None) -> int:
    """The model's default batch, scaled down to a power of two on a card with less memory."""
    from dlbench.models import get_model  # imports torch: `dlbench --help` reads this module
    b = get_model(model).default_batch
    # 10% slack: torch reports a little less than nvidia-smi for the same card (an H100 80GB
    # shows 79.2 GiB to torch), and that card must get the full batch.
    if not memory_bytes or memory_bytes >= 0.9 * REFERENCE_MEMORY_BYTES:
        return b
    scaled = b * memory_bytes / REFERENCE_MEMORY_BYTES
    return max(1, 2 ** int(math.log2(scaled))) if scaled >= 1 else 1


# The default suite's models: a residual and a plain convolutional network, a vision transformer
# and a decoder language model. A fresh process costs about 20 s on an H100 before its window
# (start, model build, cuDNN's autotuning in the first step), so five configs of three processes
# fill the five minutes. The other classic CNNs are in the classic-cnn suite (NASNet's
# autotuning alone takes about a minute per process) and BERT (its build takes about 13 s per
# process) in any sweep: dlbench throughput -m bert-base --repeat 3.
DEFAULT_MODELS = ("resnet50", "vgg16", "vit_b_16", "gpt2")


def _default_gpu(dev: DeviceFacts) -> list[ThroughputConfig]:
    # Warm-up: 5 steps and at least 1 s (clocks ramp up in well under a second of full load).
    common = dict(precision=dev.mixed, warmup_steps=5, warmup_seconds=1.0, stop=REPEAT_STOP)
    mem = dev.memory_bytes
    configs = [ThroughputConfig(model=m, batch_size=gpu_batch(m, mem), channels_last=_is_image(m),
                                **common) for m in DEFAULT_MODELS]
    configs.append(ThroughputConfig(model="resnet50", batch_size=gpu_batch("resnet50", mem),
                                    mode="eval", channels_last=True, **common))
    return configs


def _cpu(dev: DeviceFacts) -> list[ThroughputConfig]:
    # The default suite's ResNet-50, ViT-B/16 and GPT-2, and BERT, cut down until a 2-core CPU
    # times them well in about two minutes: images at 112 px (a quarter of 224's work),
    # sequences of 64, batches of 1-16. fp32, the CPU's own
    # precision (bf16 autocast is slower than fp32 on most CPUs without AMX). Warm-up: 2 steps
    # and at least 1 s, a small part of each window.
    common = dict(precision="fp32", warmup_steps=2, warmup_seconds=1.0)
    image, text = dict(common, stop=CPU_STOP), dict(common, stop=CPU_LM_STOP)
    return [
        ThroughputConfig(model="resnet50", batch_size=8, mode="train", channels_last=True,
                         input_size=CPU_IMAGE_SIZE, **image),
        ThroughputConfig(model="resnet50", batch_size=16, mode="eval", channels_last=True,
                         input_size=CPU_IMAGE_SIZE, **image),
        ThroughputConfig(model="vit_b_16", batch_size=4, mode="eval", input_size=CPU_IMAGE_SIZE,
                         **image),
        ThroughputConfig(model="bert-base", batch_size=1, mode="train", input_size=CPU_SEQ_LEN,
                         **text),
        ThroughputConfig(model="gpt2", batch_size=1, mode="train", input_size=CPU_SEQ_LEN,
                         **text),
    ]


def _classic_cnn(dev: DeviceFacts) -> list[ThroughputConfig]:
    """The tf_cnn_benchmarks study's single-GPU column: train, fp16 and fp32, eager and compiled
    (torch.compile standing in for its XLA)."""
    configs = []
    # Eager first, compiled after: the eager column is complete early, and an interrupted run
    # resumes into the compiled one. NASNet compiles last: its graph of many cells takes
    # inductor minutes per precision on an H100, and would hold up every model behind it.
    compiled_order = [m for m in CLASSIC_CNN_MODELS if m != "nasnet"] + ["nasnet"]
    for comp, models in ((None, CLASSIC_CNN_MODELS), ("default", compiled_order)):
        for m in models:
            for prec in ("fp16", "fp32"):
                bs = CLASSIC_CNN_FP16_BATCH[m] // (1 if prec == "fp16" else 2)
                configs.append(ThroughputConfig(model=m, batch_size=bs, precision=prec,
                                                compile=comp, channels_last=True, warmup_steps=5,
                                                warmup_seconds=1.0, stop=SWEEP_STOP))
    return configs


def _ms_per_batch(dev: DeviceFacts) -> list[ThroughputConfig]:
    """The classic per-model ms-per-batch table: batch 16, fp32 and fp16, eval and train
    (forward + sum().backward(), as those scripts time it)."""
    return [ThroughputConfig(model=m, batch_size=16, mode=mode, precision=prec, method="fwd-bwd",
                             warmup_steps=10, warmup_seconds=1.0, stop=GPU_STOP)
            for m in MS_PER_BATCH_MODELS for mode in ("eval", "train") for prec in ("fp32", "fp16")]


def _smoke(dev: DeviceFacts) -> list[ThroughputConfig]:
    """Seconds on any machine: the tiny test models through every path."""
    stop = StopRule(min_steps=5, min_seconds=0.2, max_seconds=2.0, target_rel_ci=0.05)
    common = dict(warmup_steps=2, warmup_seconds=0.0, stop=stop)
    return [ThroughputConfig(model="tiny_cnn", batch_size=16, **common),
            ThroughputConfig(model="tiny_cnn", batch_size=16, mode="eval", **common),
            ThroughputConfig(model="tiny_gpt", batch_size=4, precision="bf16", **common)]


def _is_image(model: str) -> bool:
    from dlbench.models import get_model  # imports torch: `dlbench --help` reads this module
    return get_model(model).kind == "image"


#: The table layouts a suite's results are printed in (``results show --view``).
VIEWS = ("throughput", "classic-cnn", "ms-per-batch")

SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("default", "resnet50, vgg16, vit_b_16, gpt2: train, bf16 (else fp16), "
          "channels_last, batches that fill an 80 GB GPU; plus ResNet-50 eval; each config in "
          f"{DEFAULT_REPEAT} fresh processes", _default_gpu, gpu_only=True,
          repeat=DEFAULT_REPEAT),
    Suite("cpu", "ResNet-50 and ViT-B/16 at 112 px, BERT and GPT-2 at sequence 64, fp32: each "
          "figure to a 5% interval in about 1.5 minutes on 2 idle cores, else flagged noisy; "
          "one process per config", _cpu),
    Suite("classic-cnn", "the six CNNs of the 2020 tf_cnn_benchmarks study on one GPU: train, "
          "fp16 and fp32, eager and compiled, in images/s", _classic_cnn, view="classic-cnn",
          gpu_only=True),
    Suite("ms-per-batch", "vgg16, resnet152, densenet161 at batch 16, fp32/fp16, eval/train, in "
          "ms per batch, as the classic per-model benchmark scripts", _ms_per_batch,
          view="ms-per-batch"),
    Suite("smoke", "tiny test models through every path, in seconds", _smoke),
)}

#: Old names, still accepted (and found in the ``suite`` column of stores written before the
#: rename), never listed: :data:`dlbench.records.compat.SUITES`.
OLD_NAMES = compat.SUITES


def canonical(name: str | None) -> str | None:
    """A suite or view name as it is called now (an old one read through
    :mod:`dlbench.records.compat`)."""
    return compat.current(OLD_NAMES, name) if name is not None else None


def view_of_suite(name: str | None, default: str = "throughput") -> str:
    """The table layout of a stored run's suite (old names included), else ``default``."""
    suite = SUITES.get(canonical(name))
    return suite.view if suite is not None else default


def suite_for(name: str | None, dev: DeviceFacts) -> tuple[Suite, list[ThroughputConfig]]:
    """The named suite (or the default one for this device) and its configs.

    A GPU-only suite asked for on a machine without a GPU is an error that names the CPU suite.
    """
    if name is None:
        name = "default" if dev.cuda else "cpu"
    name = canonical(name)
    if name not in SUITES:
        raise ConfigError(f"--suite {name!r} is unknown; choose one of {', '.join(SUITES)}")
    suite = SUITES[name]
    if suite.gpu_only and not dev.cuda:
        raise ConfigError(f"--suite {name} needs a CUDA GPU and none is visible; "
                          "'dlbench run' picks the 'cpu' suite on this machine")
    configs = suite.build(dev)
    if not dev.cuda:
        configs = [replace(c, device="cpu") for c in configs]
    return suite, configs
