"""The ``dlbench`` command: parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from types import TracebackType

from dlbench import __version__, commands
from dlbench.commands.common import (
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    as_flags,
)
from dlbench.config import ConfigError
from dlbench.launch import signals
from dlbench.measure.stopping import StopRuleError
from dlbench.models.errors import UnknownModelError
from dlbench.report.outfile import OutputError
from dlbench.report.terminal import error
from dlbench.store import StoreError

#: ``DLBENCH_DEBUG=1`` does what ``--debug`` does (for a command started by a script).
DEBUG_ENV = "DLBENCH_DEBUG"

#: What the user can fix: a usage error, one line, exit 2. ConfigError covers the data readers'
#: errors (a missing dataset, a file not in its format), the argparse-time cross-flag rules and
#: the configs' own checks, whose fields are printed as the flags that set them (as_flags).
USER_ERRORS = (ConfigError, StopRuleError, UnknownModelError, StoreError, OutputError)


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dlbench",
        description="Deep-learning benchmarks for GPUs and GPU servers: how fast this machine "
                    "trains and runs standard networks, measured with intervals and stored in SQLite.",
        epilog="start with 'dlbench run' (the default suite for this machine), then\n"
               "'dlbench results ls'.\nEvery subcommand has --help.\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"dlbench {__version__}")
    ap.add_argument("--debug", action="store_true",
                    help=f"on an error, print the traceback too (also {DEBUG_ENV}=1)")
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
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    # the signal handler's frame, or a checkpoint's, says how the interrupt was raised, not
    # where the command was
    handler = os.path.abspath(signals.__file__)
    frames = [(f.f_code, line) for f, line in traceback.walk_tb(tb)
              if os.path.abspath(f.f_code.co_filename) != handler]
    if not frames:
        return ""

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


def one_line(text: str) -> str:
    """A message as one line: a how-to of several lines (a missing dataset's) is joined, so
    every failure is exactly one line on stderr, whatever raised it."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def debugging(args: argparse.Namespace | None = None) -> bool:
    return bool(getattr(args, "debug", False)) or \
        os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "no", "false", "off")


class _NoticeFilter(logging.Filter):
    """Drops log records whose message holds ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


#: Notices libraries log to their own developers, which would stand before dlbench's one-line
#: messages: torch 2.14 warns once per enum that torchao (installed for fp8) registers with
#: pytree when transformers imports it ("<enum 'KernelPreference'> is an Enum subclass and is
#: now natively supported by torch.compile ...").
_NOTICES = (("torch.utils._pytree", "is an Enum subclass and is now natively supported"),)


def _quiet_library_notices() -> None:
    for logger, text in _NOTICES:
        log = logging.getLogger(logger)
        if not any(isinstance(f, _NoticeFilter) and f.text == text for f in log.filters):
            log.addFilter(_NoticeFilter(text))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every way it can end is one of the documented exit codes (EXIT_CODES)
    and, for a failure, one line on stderr: the traceback only with ``--debug``."""
    args = None
    _quiet_library_notices()
    try:
        try:
            # SIGTERM and SIGHUP end every command as Ctrl-C does, from the first moment: a
            # signal while the commands' modules load is one line and exit 130 too
            with signals.installed():
                args = build_parser().parse_args(argv)
                args.command_line = "dlbench " + shlex.join(sys.argv[1:] if argv is None
                                                            else list(argv))
                _quiet_broken_pipe()
                return args.handler(args)
        except Exception as exc:
            if signals.interrupted():  # an error the interrupt caused (an import cut short:
                # numpy then refuses to load again): the interrupt is what happened
                raise KeyboardInterrupt(signals.interrupted()).with_traceback(
                    exc.__traceback__) from exc
            raise
    except USER_ERRORS as exc:
        _debug_traceback(args)
        error(one_line(as_flags(exc)))
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        _debug_traceback(args)
        error(f"interrupted {interrupted_at(exc.__traceback__)}")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `dlbench results export | head`: the reader has what it wanted
        _stdout_to_devnull()
        return EXIT_OK
    except OSError as exc:  # an output or input the system refused: a full disk, a permission
        _debug_traceback(args)
        what = exc.strerror or str(exc)
        error(one_line(f"{exc.filename}: {what}" if exc.filename else what))
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - a bug: one line, never a traceback by surprise
        _debug_traceback(args)
        error(one_line(f"internal error: {type(exc).__name__}: {exc}") +
              ("" if debugging(args) else "; run with --debug for the traceback"))
        return EXIT_INTERNAL


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null once its reader has gone (``dlbench results ls | head -1``):
    what is still buffered, flushed at exit, would raise BrokenPipeError again (exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout
        pass


def _quiet_broken_pipe() -> None:
    """rich ends the process with ``SystemExit(1)`` when stdout's reader goes;
    a reader that stops early (``| head -1``) is no failure: raise BrokenPipeError instead,
    which :func:`main` ends with exit 0 and nothing on stderr."""
    try:
        from rich.console import Console
    except ImportError:
        return

    def on_broken_pipe(self: Console) -> None:
        _stdout_to_devnull()
        raise BrokenPipeError("stdout's reader has gone")
    Console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]


def _debug_traceback(args: argparse.Namespace | None) -> None:
    """With --debug (or DLBENCH_DEBUG=1), the traceback of the exception being handled."""
    if debugging(args):
        traceback.print_exc(file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
