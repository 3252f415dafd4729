"""The ``dlbench`` command: parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
from types import TracebackType
from typing import Sequence

from dlbench import commands
from dlbench.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Parser
from dlbench.config import ConfigError
from dlbench.measure.stopping import StopRuleError
from dlbench.models.errors import UnknownModelError
from dlbench.report.terminal import error
from dlbench.store import StoreError


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dlbench",
        description="Deep-learning benchmarks for GPUs and GPU servers: how fast this machine "
                    "trains and runs standard networks, measured with intervals and stored in SQLite.",
        epilog="start with 'dlbench run' (the default suite for this machine), then "
               "'dlbench results ls'. Every subcommand has --help.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for mod in commands.modules():
        mod.register(sub)
    return ap


def interrupted_at(tb: TracebackType | None) -> str:
    """Where an interrupt landed: ``in maxbatch.search (workloads/maxbatch.py:120)``.

    A run stopped by a time limit (``timeout -s INT``) with ``-q`` prints nothing else, and a
    call that stored nothing then leaves no trace of what it was doing; the innermost frame of
    dlbench's own code says it (and the innermost frame of all, when that is a library's: a
    database lock, a subprocess wait).
    """
    frames = [(f.f_code, line) for f, line in traceback.walk_tb(tb)]
    if not frames:
        return ""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def ours(code) -> bool:
        return os.path.abspath(code.co_filename).startswith(package)

    def say(code, line) -> str:
        path = os.path.abspath(code.co_filename)
        short = path[len(package):] if ours(code) else os.path.basename(path)
        return f"{code.co_name} ({short.replace(os.sep, '/')}:{line})"
    own = [fr for fr in frames if ours(fr[0])]
    text = f"in {say(*own[-1])}" if own else ""
    if not own or own[-1] != frames[-1]:
        text += f"{', ' if text else ''}waiting in {say(*frames[-1])}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.command_line = "dlbench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    try:
        return args.handler(args)
    except (ConfigError, StopRuleError, UnknownModelError, StoreError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        error(f"interrupted {interrupted_at(exc.__traceback__)}")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `dlbench results export | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
