"""The ``dlbench`` command: parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Sequence

from dlbench import commands
from dlbench.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dlbench",
        description="Deep-learning benchmarks for GPUs and GPU servers: how fast this machine "
                    "trains and runs standard networks, measured with intervals and stored in SQLite.",
        epilog="start with 'dlbench run' (the default suite for this machine), then "
               "'dlbench results ls'. Every subcommand has --help.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for mod in commands.modules():
        mod.register(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dlbench.config import ConfigError
    from dlbench.measure.stopping import StopRuleError
    from dlbench.models.base import UnknownModelError
    from dlbench.report.terminal import error
    from dlbench.store import StoreError

    args.command_line = "dlbench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    try:
        return args.handler(args)
    except (ConfigError, StopRuleError, UnknownModelError, StoreError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `dlbench results export | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
