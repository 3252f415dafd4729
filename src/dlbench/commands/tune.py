"""``dlbench tune``: try tuned mode's levers one at a time for a model and keep those that win."""

from __future__ import annotations

import argparse
import sys
import time

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EXIT_FAILED_RESULTS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    FRACTION,
    POSITIVE,
    SECONDS,
    SECONDS_OR_ZERO,
    add_command,
    add_store_flags,
    batch_size,
    csv_list,
    device,
    flatten,
    real,
)
from dlbench.jobs.sweep import NullProgress
from dlbench.measure.stopping import StopRule
from dlbench.report import export, terminal

ORDER = 12

#: Where the help's epilog lists the levers: filled in only when help is shown, since the
#: lever table imports torch (through the model registry) and `dlbench --help` must not.
LEVERS_HERE = "{levers}"


class _LeverHelp(argparse.RawDescriptionHelpFormatter):
    def add_text(self, text: str | None) -> None:
        if text and LEVERS_HERE in text:
            text = text.replace(LEVERS_HERE, _lever_lines())
        super().add_text(text)


def _lever_lines() -> str:
    from dlbench.tuning.levers import EXTRA_LEVERS, LEVERS  # heavy: torch
    return ("levers, in the order tried:\n"
            + "\n".join(f"  {lever.name:16} {lever.what}" for lever in LEVERS)
            + "\ntried only when named in --levers:\n"
            + "\n".join(f"  {lever.name:16} {lever.what}" for lever in EXTRA_LEVERS))


def _lever(text: str):
    """``--levers``: a lever's name (checked against the lever table when parsed)."""
    from dlbench.tuning.levers import lever_named  # heavy: torch
    return lever_named(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "tune", help="find the fastest configuration of a model, one lever at a time",
        description="Start from the plain eager config and pull each lever in turn on the best "
                    "config so far: measure it, keep it only if it gains more than --margin. "
                    "Prints the lever table (what each bought) and the flags of the winner; "
                    "'dlbench throughput --tuned' and 'dlbench run --tuned' then use the winner "
                    "on this GPU kind (read from --db).",
        epilog="examples:\n"
               "  dlbench tune -m resnet50 --precision bf16\n"
               "  dlbench tune -m gpt2 -b 16 --levers fused-optimizer,flash-attention,compile,"
               "cuda-graph\n\n"
               + LEVERS_HERE + "\n\n"
               "compile and CUDA graph capture time is part of each row's setup time; a lever "
               "that fails (out of memory, a capture error) is a row with its error.",
        formatter_class=_LeverHelp)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", type=batch_size,
                   help="starting batch per device (default: the model's default)")
    p.add_argument("--mode", choices=("train", "eval"), default="train")
    p.add_argument("--precision", help="starting precision (default: bf16 on a GPU that has "
                                       "it, else fp16; fp32 on the CPU)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=POSITIVE)
    p.add_argument("--levers", type=csv_list(_lever),
                   help="levers to try, in this order (default: every lever listed below "
                        "under 'in the order tried')")
    p.add_argument("--margin", type=real(0, 1, high_open=True),
                   help="keep a lever only if it gains more than this fraction (default 0.01)")
    p.add_argument("--device", default="auto", type=device,
                   help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--warmup", type=COUNT, default=10)
    p.add_argument("--warmup-time", type=SECONDS_OR_ZERO, default=1.0)
    p.add_argument("--min-time", type=SECONDS_OR_ZERO, default=2.0)
    p.add_argument("--max-time", type=SECONDS, default=10.0)
    p.add_argument("--target-ci", type=FRACTION, default=0.01)
    add_store_flags(p)
    p.add_argument("--tag", help="label this run")
    p.add_argument("--json", action="store_true",
                   help="print this run's records as JSON on stdout (instead of the tables)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from dlbench.jobs import plans, runs  # heavy: torch
    from dlbench.report.tuned_tables import lever_table  # heavy: torch
    from dlbench.tuning.levers import flags_of  # heavy: torch

    stop = StopRule(min_seconds=args.min_time, max_seconds=args.max_time,
                    target_rel_ci=args.target_ci)
    searches = runs.tune_searches(
        flatten(args.model, []), batch=args.batch_size, precision=args.precision,
        device=args.device, levers=args.levers, margin=args.margin,
        facts=plans.device_facts(), mode=args.mode, optimizer=args.optimizer,
        input_size=args.input_size, warmup_steps=args.warmup,
        warmup_seconds=args.warmup_time, stop=stop)
    env = envmod.capture_environment()
    t0 = time.perf_counter()
    outcome = runs.run_tune(searches, args.db, args.command_line, env, tag=args.tag,
                            progress=NullProgress() if args.quiet else terminal.RichProgress())
    if args.json:
        sys.stdout.write(export.to_json(outcome.records) + "\n")
    for search in searches if not args.json else ():
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
