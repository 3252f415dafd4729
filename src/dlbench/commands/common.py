"""What the subcommands share: exit codes, list-flag parsing, store and sweep flags, pre-flight."""

from __future__ import annotations

import argparse
from typing import Sequence

from dlbench.records.throughput import ThroughputConfig
from dlbench.models import get_model
from dlbench.suites import DeviceFacts
from dlbench.workloads.devices import bf16_available, check_supported, resolve_device

EXIT_OK = 0
EXIT_USAGE = 2          # bad flags, unknown model, precision the device lacks: nothing ran
EXIT_FAILED_RESULTS = 3  # the sweep finished but some results are failures (stored as rows)
EXIT_FATAL = 4          # a fatal device error stopped the sweep (results so far are kept)
EXIT_INTERRUPTED = 130  # Ctrl-C (results so far are kept)

EPILOG = """\
exit codes: 0 all results ok; 2 usage error (nothing ran); 3 some results are failures (stored
as rows, e.g. out of memory); 4 a fatal device error stopped the sweep; 130 interrupted.
Results measured before a failure or Ctrl-C are always kept; add --resume to go on."""


def csv_list(kind: type = str):
    """An argparse type for comma-separated lists: ``-b 64,128`` or repeated flags."""
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            return [kind(t) for t in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def flatten(lists: list[list] | None, default: list) -> list:
    if not lists:
        return list(default)
    return list(dict.fromkeys(x for xs in lists for x in xs))


def batch_size(text: str) -> int | None:
    if text in ("default", "auto"):
        return None
    n = int(text)
    if n < 1:
        raise ValueError(f"batch size must be >= 1, got {n}")
    return n


def on_off(text: str) -> bool:
    t = text.lower()
    if t in ("on", "true", "yes", "1", "nhwc", "channels_last"):
        return True
    if t in ("off", "false", "no", "0", "nchw"):
        return False
    raise ValueError(f"expected on/off, got {text!r}")


def compile_mode(text: str) -> str | None:
    t = text.lower()
    if t in ("none", "off", "eager", "no"):
        return None
    return "default" if t in ("on", "yes") else t


def add_store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default="dlbench.db", metavar="PATH",
                   help="SQLite result store (default: ./dlbench.db; created if missing)")


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    add_store_flags(p)
    p.add_argument("--tag", help="label this run, to find and compare it later")
    p.add_argument("--resume", action="store_true",
                   help="skip configs this environment already measured in --db (and known OOMs)")
    p.add_argument("--isolate", action="store_true",
                   help="run each benchmark in a fresh process (survives fatal CUDA errors; "
                        "costs a few seconds of start-up per benchmark, outside the timing)")
    p.add_argument("--json", action="store_true", help="print this run's records as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def device_facts() -> DeviceFacts:
    import torch
    cuda = torch.cuda.is_available()
    mem = torch.cuda.get_device_properties(0).total_memory if cuda else None
    return DeviceFacts(cuda=cuda, bf16=bf16_available(), memory_bytes=mem)


def preflight(configs: Sequence[ThroughputConfig]) -> None:
    """Every model known, every precision possible on its device: checked before anything runs."""
    for cfg in configs:
        spec = get_model(cfg.model)
        check_supported(cfg, spec, resolve_device(cfg.device))
