"""What the subcommands share: exit codes, list-flag parsing, store, sweep and multi-host flags,
hidden old names, and the printing of tables and search progress. Parsing and printing only:
the work is in the modules the commands call.

Nothing here may import torch (``dlbench --help`` reads this module).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from rich.markup import escape

from dlbench.config import CHECKPOINT_POLICIES, ConfigError
from dlbench.report import tables, terminal
from dlbench.report.table import Table
from dlbench.store import Store

EXIT_OK = 0
EXIT_INTERNAL = 1       # a bug in dlbench: one line naming the error; --debug for the traceback
EXIT_USAGE = 2          # bad flags, unknown model, precision the device lacks: nothing ran
EXIT_FAILED_RESULTS = 3  # the sweep finished but some results are failures (stored as rows)
EXIT_FATAL = 4          # a fatal device error stopped the sweep (results so far are kept)
EXIT_REGRESSION = 5     # compare: B is significantly worse than A
EXIT_NO_MATCH = 6       # compare: no config has a result on both sides
EXIT_INTERRUPTED = 130  # Ctrl-C (results so far are kept)

EPILOG = """\
exit codes: 0 all results ok; 2 usage error (nothing ran); 3 some results are failures (stored
as rows, e.g. out of memory); 4 a fatal device error stopped the sweep; 130 interrupted.
Results measured before a failure or Ctrl-C are always kept; add --resume to go on."""

#: The exit codes of every command, as ``dlbench --help`` lists them.
EXIT_CODES = """\
exit codes (every command):
  0    done, every result ok
  1    internal error: a bug in dlbench; one line names it (--debug for the traceback)
  2    usage error: a bad flag, input file, data directory, store or output; nothing ran
       or nothing was written
  3    some results are failures (stored as rows), or 'results check' found a problem
  4    a fatal device error stopped the sweep (results so far are kept)
  5    'compare' found a regression
  6    'compare' found nothing to compare (no config with a result on both sides)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP); results so far are kept
Every failure is one line on stderr; 'dlbench --debug COMMAND ...' (or DLBENCH_DEBUG=1)
adds the traceback."""


#: The line every command's --help ends with, where its epilog names none of its own.
EXIT_CODES_SHORT = ("exit codes: 0 ok; 1 internal error; 2 usage error (nothing ran); 3 some "
                    "results are failures; 4 a fatal device error stopped the sweep; 5 compare: "
                    "a regression; 6 compare: nothing matched; 130 interrupted ('dlbench --help' "
                    "says more)")


class Parser(argparse.ArgumentParser):
    """A parser whose usage error is one line on stderr (``dlbench compare: error: --alpha must
    be in (0, 1), got 5; see dlbench compare --help``), exit code 2: the usage block argparse
    prints first buries the line that says what is wrong."""

    def error(self, message: str):  # type: ignore[override]
        # "argument --profile: must be >= 0, got -1" -> "--profile must be >= 0, got -1"
        message = re.sub(r"^argument (\S+): (must|expected) ", r"\1 \2 ", message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def add_command(sub: argparse._SubParsersAction, name: str, **kw) -> argparse.ArgumentParser:
    """``sub.add_parser(name, **kw)`` whose usage errors are one line (:class:`Parser`).

    argparse gives every subparser the class of the top-level parser and has no argument to
    choose another, so the parser made is given :class:`Parser`'s ``error``; once ``dlbench.cli``
    builds a :class:`Parser` itself, the subparsers are born one and this does nothing.
    """
    epilog = kw.get("epilog") or ""
    if "exit codes" not in epilog:  # every command's --help lists them
        kw["epilog"] = (epilog + "\n\n" if epilog else "") + EXIT_CODES_SHORT
    p = sub.add_parser(name, **kw)
    if not isinstance(p, Parser):
        p.__class__ = Parser  # same layout: Parser only overrides a method
    return p


# -- a config's error as the command line says it -----------------------------------------------
#: The flag that sets each config field. A config's own check names its fields (what a Python
#: caller passes: ``precision``, ``batch_size``); the command line prints these flags in their
#: place (:func:`as_flags`). A boolean field's flag is the one that sets the value an error
#: names: ``cuda_graph=True`` is ``--cuda-graph``, ``autotune=False`` is ``--no-autotune``.
#: tests/test_field_errors.py checks that every flag here is one the parsers define.
FIELD_FLAGS: Mapping[str, str] = MappingProxyType({
    # a model at one setting (throughput, and the base of scale, maxbatch, net)
    "model": "-m/--model", "batch_size": "-b/--batch-size", "mode": "--mode",
    "precision": "--precision", "compile": "--compile", "channels_last": "--channels-last",
    "optimizer": "--optimizer", "method": "--method", "input_size": "--input-size/--seq-len",
    "device": "--device", "warmup_steps": "--warmup", "warmup_seconds": "--warmup-time",
    "seed": "--seed", "telemetry_interval_s": "--telemetry-interval",
    "checkpointing": "--checkpointing", "checkpoint_policy": "--checkpointing",
    "cuda_graph": "--cuda-graph", "optimizer_impl": "--optimizer-impl",
    "attention": "--attention", "pad_vocab": "--pad-vocab", "autotune": "--no-autotune",
    "compile_loss": "--compile-loss", "profile_steps": "--profile", "framework": "--framework",
    # the stopping rule
    "min_steps": "--min-steps", "max_steps": "--max-steps", "min_seconds": "--min-time",
    "max_seconds": "--max-time", "target_rel_ci": "--target-ci",
    # scale, maxbatch
    "gpus": "--gpus", "strategy": "--strategy", "interconnect": "--interconnect",
    "bucket_mb": "--bucket-mb", "backend": "--backend", "nnodes": "--nnodes", "tp": "--tp",
    "offload": "--offload", "fp8": "--fp8", "start": "--start", "limit": "--max",
    "tolerance": "--tolerance", "rdzv_endpoint": "--rdzv-endpoint", "slurm": "--slurm",
    # comm
    "op": "--op", "size_bytes": "--min-bytes/--max-bytes", "ranks": "--ranks",
    "dtype": "--dtype", "iters": "--iters", "warmup": "--warmup", "timing": "--timing",
    "iters_per_sample": "--iters-per-sample", "min_size": "--min-bytes",
    "max_size": "--max-bytes", "factor": "--factor",
    # net
    "hosts": "--hosts", "rate_bps": "--link rate", "delay_s": "--link delay",
    "steps": "--steps", "compute_steps": "--compute-steps",
    # peak
    "verbs": "--verbs",
    # generate
    "prompt_len": "--prompt-len", "output_len": "--output-len", "path": "--path",
    "fp8_recipe": "--fp8-recipe", "warmup_requests": "--warmup",
    "profile_requests": "--profile", "fuse": "--fuse", "fold_gqa": "--fold-gqa",
    # serve
    "api": "--api", "buffers": "--buffers", "fixed_length": "--fixed-length", "concurrency": "--concurrency",
    "rate": "--rate", "burstiness": "--burstiness", "num_requests": "--num-requests",
    "duration_s": "--duration", "request_timeout_s": "--request-timeout",
    "stall_timeout_s": "--stall-timeout", "late_threshold_s": "--late-threshold",
    "tokenizer": "--tokenizer",
    # train
    "target": "--target", "max_epochs": "--max-epochs", "loader": "--loader",
    "workers": "--workers", "lr": "--lr", "weight_decay": "--weight-decay",
    "warmup_epochs": "--warmup-epochs", "decay_epochs": "--decay-epochs",
    "throughput_steps": "--throughput-steps", "augment": "--augment",
    "image_size": "--image-size", "seeds": "--seeds",
})

# A quoted value (left as it is: a name the user typed may be a field's name), or a field name,
# bare or given a value as a keyword argument (``precision="bf16"``, ``tp=2``, ``fp8=True``).
_FIELD_WORD = re.compile(
    r"""(?P<quoted>(?<!\w)"[^"]*"(?!\w)|(?<!\w)'[^']*'(?!\w))"""
    r"""|(?<![\w.-])(?P<name>[a-z][a-z0-9_]*)"""
    r"""(?:=(?P<value>"[^"]*"|'[^']*'|[^\s,;:()"']+))?(?![\w-])""")


_QUOTES = "\"'"


def as_flags(exc: BaseException) -> str:
    """An error's message as the command line prints it: a :class:`ConfigError`'s fields
    spelled as the flags that set them (:data:`FIELD_FLAGS`), any other error as it is.

    ``batch_size must be >= 1`` becomes ``-b/--batch-size must be >= 1`` (the field the error
    is about, where it starts the message), ``use precision="bf16"`` becomes ``use --precision
    bf16`` (a keyword argument, anywhere) and ``cuda_graph=True`` becomes ``--cuda-graph``; a
    field named bare elsewhere only where the error lists it (``also``), since the same word
    may be prose ("that compile mode").
    """
    text = str(exc)
    if not isinstance(exc, ConfigError):
        return text
    bare = set(exc.also)

    def spell(m: re.Match) -> str:
        name, value = m.group("name"), m.group("value")
        flag = FIELD_FLAGS.get(name or "")
        if flag is None:
            return m.group(0)
        if value is None:
            leads = m.start() == 0 and name == exc.field
            return flag if leads or name in bare else m.group(0)
        if value in ("True", "False"):
            return flag
        return f"{flag} {value.strip(_QUOTES)}"
    return _FIELD_WORD.sub(spell, text)


# -- argparse types that check at the door -------------------------------------------------------
# Each names its range in the message; argparse prefixes the flag ("argument --alpha: ...").
def integer(low: int = 0, high: int | None = None) -> Callable[[str], int]:
    """A whole number in ``[low, high]``."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if n < low or (high is not None and n > high):
            span = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {n}")
        return n
    parse.__name__ = "integer"
    return parse


def real(low: float | None = None, high: float | None = None, *, low_open: bool = False,
         high_open: bool = False) -> Callable[[str], float]:
    """A finite number in the range ``low``..``high`` (each end closed unless ``*_open``):
    nan and inf are refused everywhere, since no flag of dlbench means anything by them."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        too_low = low is not None and (x <= low if low_open else x < low)
        too_high = high is not None and (x >= high if high_open else x > high)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"must be {_span(low, high, low_open, high_open)}, "
                                             f"got {text.strip()}")
        return x
    parse.__name__ = "number"
    return parse


def _span(low, high, low_open: bool, high_open: bool) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


#: The types the commands share.
POSITIVE = integer(1)                          # counts of things: GPUs, seeds, epochs, steps
COUNT = integer(0)                             # may be zero: warm-up steps, workers, profile
SEED = integer(0, 2 ** 32 - 1)                 # what numpy's and torch's seeding take
POSITIVE_REAL = real(0, low_open=True)         # step times, rates, sizes: > 0
SECONDS = POSITIVE_REAL                        # a time limit or interval: > 0
SECONDS_OR_ZERO = real(0)                      # a minimum time, a weight decay: >= 0
FRACTION = real(0, 1, low_open=True, high_open=True)  # alpha, a target interval: (0, 1)


_DEVICE = re.compile(r"(auto|cpu|cuda(:\d+)?|mps|xpu(:\d+)?)")


def device(text: str) -> str:
    """An argparse type for ``--device``: auto, cpu, cuda, cuda:N (mps, xpu[:N]). Checked at the
    door: torch's own parse of a bad name is a RuntimeError deep inside a run (and a collective
    on a device that does not exist waited for its timeout)."""
    t = text.strip().lower()
    if not _DEVICE.fullmatch(t):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    return t


def check_below(value: int | None, flag: str, limit: int | None, limit_flag: str) -> None:
    """A cross-flag rule at the door: ``value`` must be < ``limit`` (either may be unset)."""
    if value is not None and limit is not None and value >= limit:
        raise ConfigError(f"{flag} {value} must be below {limit_flag} {limit}")


def csv_list(kind: Callable[[str], object] = str):
    """An argparse type for comma-separated lists: ``-b 64,128`` or repeated flags. The element
    parser is kept as ``parse.element``, so a test can check that a flag's values mean the same
    in every command, listed or single."""
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            return [kind(t) for t in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.element = kind  # type: ignore[attr-defined]
    parse.__name__ = f"list of {getattr(kind, '__name__', 'value')}"
    return parse


def hidden_alias(p: argparse.ArgumentParser, old: str, dest: str, **kw) -> None:
    """An old spelling of a flag, still taken but not shown in --help (the new one is)."""
    p.add_argument(old, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)


def flatten(lists: list[list] | None, default: list) -> list:
    if not lists:
        return list(default)
    return list(dict.fromkeys(x for xs in lists for x in xs))


def batch_size(text: str) -> int | None:
    """``-b``: a number or ``default`` (None: the model's batch for the device). ``auto``, the
    largest batch that fits, is taken by the commands that can search for it (throughput, run);
    elsewhere it is refused rather than read as ``default``, so it means one thing everywhere."""
    if text == "default":
        return None
    if text == "auto":
        raise ValueError("'auto' (the largest batch that fits) is taken by 'dlbench throughput'; "
                         "here give a number or 'default'")
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


def check_store(db: str) -> None:
    """Refuse an unusable ``--db`` (a foreign SQLite file, a directory, a newer store) before a
    command prints or measures anything; an existing store is only read, a missing one is left
    for the run to create."""
    if Path(db).exists():
        Store(db).close()


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    add_store_flags(p)
    p.add_argument("--tag", help="label this run, to find and compare it later")
    p.add_argument("--resume", action="store_true",
                   help="skip configs this environment already measured in --db (and known OOMs)")
    p.add_argument("--isolate", action="store_true",
                   help="run each benchmark in a fresh process (survives fatal CUDA errors; "
                        "costs a few seconds of start-up per benchmark, outside the timing)")
    add_output_flags(p, "print this run's records as JSON on stdout", "no progress bar")


def add_output_flags(p: argparse.ArgumentParser, json_help: str, quiet_help: str) -> None:
    """``--json`` and ``-q/--quiet``, which every command that prints results takes. Each
    command says what its JSON holds and what ``-q`` leaves out: "quiet" cannot mean one thing
    for a sweep (no progress bar) and for a listing (the ids alone), but it always prints less
    and never changes what is measured or stored. With ``--json`` stdout holds the JSON alone;
    progress and notes go to stderr."""
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("-q", "--quiet", action="store_true", help=quiet_help)


def print_json(data: object) -> None:
    """``data`` as indented JSON on stdout, the one thing ``--json`` puts there."""
    sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")


def show_table(table: Table, quiet: bool = False) -> None:
    """A table; with ``-q`` its rows alone, without its title and notes (the figures for a
    reader who knows what they are)."""
    terminal.print_table(dataclasses.replace(table, title="", notes=()) if quiet else table)


MULTINODE = """\
several hosts: run the same command on every host, adding
  --nnodes N --node-rank R --rdzv-endpoint HOST:PORT     (HOST = any one of the hosts)
dlbench starts one torchrun agent per host (torch.distributed.run --nnodes N --node-rank R
--rdzv-backend c10d --rdzv-endpoint HOST:PORT); --gpus is then GPUs per host. Every host's
--db receives the whole job's record (all ranks' step times).
Slurm: one task per node, e.g. in an sbatch script (examples/slurm/scale.sbatch)
  export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) MASTER_PORT=29500
  srun --ntasks-per-node 1 bash -c \\
    'dlbench scale -m resnet50 --gpus 8 --slurm --db node-$SLURM_NODEID.db'
  dlbench results merge --db job.db node-*.db
The single quotes matter: each task's shell expands $SLURM_NODEID on its own node; expanded
once in the batch shell, every node would write the same file. --slurm reads SLURM_NNODES,
SLURM_NODEID, SLURM_JOB_ID and MASTER_ADDR:MASTER_PORT. 'results merge' keeps each multi-node
result once (every host stores the whole job). Without Slurm: examples/torchrun/two_nodes.sh.
dlbench never turns NVLink multicast on: every rank gets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1."""


def add_dist_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nnodes", type=POSITIVE, default=1, help="hosts in the job (default 1)")
    p.add_argument("--node-rank", type=COUNT, default=0, help="this host's index, 0..N-1")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="rendezvous (c10d store) address for --nnodes > 1")
    p.add_argument("--rdzv-id", default="dlbench", help="job id shared by the hosts")
    p.add_argument("--slurm", action="store_true",
                   help="take --nnodes, --node-rank, --rdzv-* from Slurm's environment")


def rendezvous_flags(args: argparse.Namespace) -> dict:
    """The multi-host flags of ``add_dist_flags`` as ``jobs.plans.rendezvous`` takes them.

    A node rank outside ``0..nnodes-1`` is refused here: torchrun would wait for the missing
    host until its rendezvous timeout (900 s). (With ``--slurm`` the values come from Slurm.)"""
    if not args.slurm:
        check_below(args.node_rank, "--node-rank", args.nnodes, "--nnodes")
    return dict(nnodes=args.nnodes, node_rank=args.node_rank, endpoint=args.rdzv_endpoint,
                run_id=args.rdzv_id, slurm=args.slurm)


def one_of(names: Sequence[str], old: Mapping[str, str] | None = None,
           flag: str = "") -> Callable[[str], str]:
    """An argparse ``type=`` for a choice whose old names are still accepted but never shown:
    ``old`` maps each to its new name. Use with ``metavar="{a,b}"`` (argparse's ``choices``
    would list the old names too, or refuse them)."""
    old = dict(old or {})

    def parse(text: str) -> str:
        name = old.get(text, text)
        if name not in names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(names)} (got {text!r})")
        return name
    parse.__name__ = flag or "name"  # argparse names the type in its errors
    return parse


def metavar(names: Sequence[str]) -> str:
    return "{" + ",".join(names) + "}"


def say_to_stderr(quiet: bool) -> Callable[[str], None]:
    """A progress line printer: rich markup to stderr, or nothing with ``-q``. Callers
    :func:`escape` the data they put in a line (labels, errors, paths)."""
    return (lambda text: None) if quiet else (lambda text: terminal.stderr.print(text))


def exit_code(records: Sequence, interrupted: bool = False) -> int:
    """130 if interrupted, 3 if some stored result is a failure, else 0."""
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED_RESULTS if any(not r.ok for r in records) else EXIT_OK


def show_tables(records: Sequence, view: str, label: str, quiet: bool = False,
                peak_records: Sequence = ()) -> None:
    """The tables for a set of records of any kinds: each kind gets its own layout (with
    ``quiet``, without titles and notes: :func:`show_table`); ``peak_records`` as
    :func:`dlbench.report.tables.tables_for` takes them."""
    if not records:
        terminal.stdout.print("no results")
        return
    for table in tables.tables_for(records, label, view, peak_records):
        show_table(table, quiet)
    for r in records:
        skipped = getattr(r, "skipped_steps", lambda: None)()
        if skipped:
            terminal.warn(f"{r.config.label}: GradScaler lowered the loss scale {skipped} time(s) "
                          f"in the measured window: at least {skipped} step(s) skipped the "
                          f"optimizer (fp16 overflow), so the figure is slightly optimistic")


def show_failures(records: Sequence, limit: int = 1500) -> None:
    """Each failed record's config, error type and (the start of) its error."""
    for r in records:
        if not r.ok:
            terminal.error(f"{r.config.label}: {r.error_type}: {(r.error or '')[:limit]}")


class SearchPrinter:
    """A largest-batch search's progress as lines (``jobs.maxbatch_search.SearchProgress``):
    rich markup, with every label and error escaped."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def reused(self, cfg, record) -> None:
        self.say(f"{escape(cfg.label)}: batch {record.best_batch} (stored result {record.id})")

    def searching(self, cfg, resumed: int) -> None:
        self.say(f"{escape(cfg.label)}: searching" + (f" (resumed: {resumed} batch(es) probed before)"
                                             if resumed else ""))

    def probing(self, batch: int) -> None:
        self.say(f"  batch {batch}: probing ...")

    def probed(self, p) -> None:
        took = f" ({p.wall_s:.0f} s)" if p.wall_s is not None else ""
        if not p.fits:
            self.say(f"  batch {p.batch}: [red]{escape(str(p.outcome))}[/red]{took}")
            return
        peak = p.allocated_peak_bytes
        self.say(f"  batch {p.batch}: fits" + (f", peak {peak / tables.GIB:.2f} GiB" if peak
                                               else "") + took)

    def searched(self, cfg, record) -> None:
        self.say(escape(f"{cfg.label}: " + (f"largest batch {record.best_batch}" if record.ok
                                            else f"{record.error_type}: {record.error}")))

    def measure_failed(self, batch: int, earlier: bool, lower: int | None) -> None:
        self.say(f"  measuring at batch {batch} ran out of memory"
                 f"{' in an earlier run' if earlier else ''}; trying {lower}")

    def fatal(self) -> None:
        self.say("[red]a fatal device error: this process cannot measure any more; "
                 "rerun with --resume --isolate[/red]")


def add_checkpointing(p: argparse.ArgumentParser, what: str) -> None:
    """``--checkpointing [full|selective]``: off without it, ``full`` when given bare."""
    p.add_argument("--checkpointing", nargs="?", const="full", default=None,
                   choices=CHECKPOINT_POLICIES, metavar="{full,selective}",
                   help=f"activation checkpointing{what}: full (the default when given) "
                        "recomputes every activation of a block in the backward pass; "
                        "selective keeps its matmuls' and attention's outputs and recomputes "
                        "the rest (less memory saved, no matmul repeated)")


def checkpointing_fields(args: argparse.Namespace) -> dict[str, object]:
    """The config fields of ``--checkpointing [POLICY]``."""
    return {"checkpointing": args.checkpointing is not None,
            "checkpoint_policy": args.checkpointing or "full"}



def add_strategy_flags(p: argparse.ArgumentParser, strategies: str, gpus: str) -> None:
    """``--gpus``, ``--strategy`` and the sharded strategies' flags that change what a rank
    holds (``--tp``, ``--offload``, ``--fp8``), as ``dlbench scale`` and ``dlbench maxbatch``
    both take them; ``strategies`` and ``gpus`` are each command's help for the first two
    (which strategies, which default)."""
    p.add_argument("--gpus", action="append", type=csv_list(POSITIVE), help=gpus)
    p.add_argument("--strategy", action="append", type=csv_list(), help=strategies)
    p.add_argument("--tp", type=POSITIVE, default=None, metavar="N",
                   help="fsdp+tp's tensor-parallel degree, GPUs per TP group, a divisor of the "
                        "GPUs per host (default: 2 where it divides them, else 1; at one GPU "
                        "always 1). --strategy tp always splits over all --gpus")
    p.add_argument("--offload", action="store_true",
                   help="fsdp and fsdp+tp: FSDP2's CPU offload (CPUOffloadPolicy) of the "
                        "parameters, gradients and optimizer state, which then live in pinned "
                        "host memory; each block's parameters are copied to the GPU for its "
                        "all-gather and its gradients back. The optimizer step then runs on the "
                        "CPU (PyTorch's behaviour): for the largest models, slow; each rank "
                        "gets OMP_NUM_THREADS = the host's cores / ranks per host, unless set")
    p.add_argument("--fp8", action="store_true",
                   help="ddp, fsdp, tp, fsdp+tp: fp8 matmuls in the linear layers, through "
                        "torchao's float8 training (pip install torchao), applied before "
                        "sharding and compile as torchtitan does; the LM head and layers whose "
                        "features do not divide by 16 stay in --precision. Needs an "
                        "H100/Ada-class GPU (sm_89+); use it with --compile, which fuses "
                        "torchao's casts")
