"""``dlbench tune``: try tuned mode's levers one at a time for a model and keep those that win."""

from __future__ import annotations

import argparse
import time
from typing import Iterator

from dlbench import env as envmod
from dlbench.commands.common import (EXIT_FAILED_RESULTS, EXIT_INTERRUPTED, EXIT_OK,
                                     add_store_flags, batch_size, csv_list, device_facts,
                                     flatten, preflight)
from dlbench.records.throughput import ThroughputConfig
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model
from dlbench.report import terminal
from dlbench.store import Store
from dlbench.suites import gpu_batch
from dlbench.sweep import NullProgress, run_sweep
from dlbench.tuning.levers import EXTRA_LEVERS, LEVERS, flags_of, lever_named
from dlbench.tuning.search import MARGIN, LeverSearch
from dlbench.workloads.devices import resolve_device

ORDER = 12


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune", help="find the fastest configuration of a model, one lever at a time",
        description="Start from the plain eager config and pull each lever in turn on the best "
                    "config so far: measure it, keep it only if it gains more than --margin. "
                    "Prints the lever table (what each bought) and the flags of the winner; "
                    "'dlbench throughput --tuned' and 'dlbench run --tuned' then use the winner "
                    "on this GPU kind (read from --db).",
        epilog="examples:\n"
               "  dlbench tune -m resnet50 --precision bf16\n"
               "  dlbench tune -m gpt2 -b 16 --levers fused-optimizer,flash-attention,compile,"
               "cuda-graph\n\n"
               "levers, in the order tried:\n" + "\n".join(
                   f"  {lever.name:16} {lever.what}" for lever in LEVERS) + "\n"
               "tried only when named in --levers:\n" + "\n".join(
                   f"  {lever.name:16} {lever.what}" for lever in EXTRA_LEVERS) + "\n\n"
               "compile and CUDA graph capture time is part of each row's setup time; a lever "
               "that fails (out of memory, a capture error) is a row with its error.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", type=batch_size,
                   help="starting batch per device (default: the model's default)")
    p.add_argument("--mode", choices=("train", "eval"), default="train")
    p.add_argument("--precision", help="starting precision (default: bf16 on a GPU that has "
                                       "it, else fp16; fp32 on the CPU)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=int)
    p.add_argument("--levers", type=csv_list(lever_named),
                   help="levers to try, in this order (default: "
                        f"{','.join(lever.name for lever in LEVERS)})")
    p.add_argument("--margin", type=float, default=MARGIN,
                   help="keep a lever only if it gains more than this fraction (default 0.01)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--warmup-time", type=float, default=1.0)
    p.add_argument("--min-time", type=float, default=2.0)
    p.add_argument("--max-time", type=float, default=10.0)
    p.add_argument("--target-ci", type=float, default=0.01)
    add_store_flags(p)
    p.add_argument("--tag", help="label this run")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_tune)


class _Searches:
    """Several models' searches as one sweep: routes each record to the search that asked."""

    def __init__(self, searches: list[LeverSearch]) -> None:
        self.searches = searches
        self.active: LeverSearch | None = None
        self.seen: dict[str, object] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self.searches)

    def __iter__(self) -> Iterator[ThroughputConfig]:
        for search in self.searches:
            self.active = search
            yield from search

    def observe(self, record) -> None:
        self.seen[record.config.key()] = record
        self.active.observe(record)

    def again(self, cfg: ThroughputConfig) -> None:  # a config the sweep measured already
        self.active.observe(self.seen[cfg.key()])


class _Feed(NullProgress):
    def __init__(self, searches: _Searches, inner) -> None:
        self.searches, self.inner = searches, inner

    def begin(self, total: int) -> None:
        self.inner.begin(total)

    def start(self, cfg) -> None:
        self.inner.start(cfg)

    def done(self, record) -> None:
        self.searches.observe(record)
        self.inner.done(record)

    def skipped(self, cfg) -> None:
        self.searches.again(cfg)

    def end(self) -> None:
        self.inner.end()


def cmd_tune(args: argparse.Namespace) -> int:
    from dlbench.launch.inline import InlineLauncher
    from dlbench.report.tuned_tables import lever_table
    facts = device_facts()
    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    precision = args.precision or (("bf16" if facts.bf16 else "fp16") if on_gpu else "fp32")
    stop = StopRule(min_seconds=args.min_time, max_seconds=args.max_time,
                    target_rel_ci=args.target_ci)
    levers = args.levers or list(LEVERS)
    searches = []
    for name in flatten(args.model, []):
        spec = get_model(name)
        batch = args.batch_size or (gpu_batch(spec.name, facts.memory_bytes) if on_gpu
                                    else max(1, min(16, spec.default_batch // 4)))
        base = ThroughputConfig(model=spec.name, batch_size=batch, mode=args.mode,
                                precision=precision, optimizer=args.optimizer,
                                input_size=args.input_size, device=args.device,
                                warmup_steps=args.warmup, warmup_seconds=args.warmup_time,
                                stop=stop)
        searches.append(LeverSearch(base, spec, device.type, levers, args.margin))
    preflight([s.base for s in searches])
    env = envmod.capture_environment()
    chain = _Searches(searches)
    inner = NullProgress() if args.quiet else terminal.RichProgress()
    t0 = time.perf_counter()
    with Store(args.db) as store:
        outcome = run_sweep(chain, store, InlineLauncher(), env, command=args.command_line,
                            suite="tune", tag=args.tag, progress=_Feed(chain, inner))
    for search in searches:
        if not search.trials:
            continue
        terminal.print_table(lever_table(search.trials, search.base.model))
        if search.best is not None:
            terminal.stdout.print(f"fastest found: dlbench throughput {flags_of(search.best.config)}")
    if outcome.message:
        terminal.error(outcome.message)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(outcome.records)} "
                          f"result(s) stored in {args.db} (run {outcome.run_id}); "
                          "'--tuned' runs now use these winners on this GPU kind")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FAILED_RESULTS if any(not r.ok for r in outcome.records) else EXIT_OK
