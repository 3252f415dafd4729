"""The command line as the tests run it: one runner, two ways.

:func:`run` calls ``dlbench.cli.main`` in this process, with the arguments, working directory,
environment and stdin the test gives, and returns what a subprocess would: the exit code (an
argparse ``SystemExit`` included), stdout and stderr as text (what Python writes and what is
written to file descriptors 1 and 2, by C code or by a child such as an ``--isolate`` worker).
A fresh interpreter costs a second or more of CPU (torch's import); most tests are about what a
command prints, stores and returns, not about the process it runs in.

:func:`spawn` (and :func:`popen`) start ``python -m dlbench`` as a user's shell does: for what
is about processes, signals, the exit code of a child, the environment a child starts with, or
isolation from the test's own interpreter.

Both return :class:`subprocess.CompletedProcess`, so a test can move from one to the other
without changing an assertion.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: Short windows for CLI runs of the tiny models (the flags of conftest.FAST_STOP).
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "0.3", "--warmup", "1",
        "--warmup-time", "0", "--target-ci", "0.05"]


def child_env(env: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m dlbench`` child: this checkout's ``src`` first on
    PYTHONPATH and one OpenMP thread (tiny models gain nothing from more, and a 2-core machine
    running tests in parallel has none to spare)."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(extra)
    return e


def spawn(*args: str, cwd: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
          timeout: float = 300, input: str | None = None,
          python: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """``python [python flags] -m dlbench ARGS`` in a fresh interpreter, as a shell runs it."""
    return subprocess.run([sys.executable, *python, "-m", "dlbench", *args], capture_output=True,
                          text=True, timeout=timeout, env=child_env(env), cwd=cwd, input=input)


def popen(*args: str, env: Mapping[str, str] | None = None, **kw) -> subprocess.Popen:
    """``python -m dlbench ARGS`` started and left running (to be signalled, killed, waited)."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.Popen([sys.executable, "-m", "dlbench", *args], env=child_env(env), **kw)


def run(*args: str, cwd: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """``dlbench ARGS`` in this process, returning what :func:`spawn` would.

    ``env`` replaces the environment for the call, as a child's would be (with :func:`child_env`'s
    additions; its TMPDIR is where the call's temporary files go); the working directory, the
    environment, stdin, signal handlers, warning filters and the torch settings a command may
    change are put back afterwards. ``timeout`` is accepted for the same signature as
    :func:`spawn`; in this process pytest-timeout bounds the call.
    """
    from dlbench.cli import main
    argv = [str(a) for a in args]
    with _isolated(cwd, child_env(env), input), _captured() as out:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors, --help and --version
            code = _exit_code(exc)
    return subprocess.CompletedProcess(["dlbench", *argv], code, out.stdout, out.stderr)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
    return 1


class _Capture:
    stdout = ""
    stderr = ""


@contextlib.contextmanager
def _captured() -> Iterator[_Capture]:
    """File descriptors 1 and 2 and ``sys.stdout``/``sys.stderr`` into two files, read back as
    text once the block is over. Python's writes go to the same descriptors (unbuffered), so the
    order of lines from Python, C code and children is the order they were written in."""
    import tempfile
    got = _Capture()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        os.dup2(out_f.fileno(), 1)
        os.dup2(err_f.fileno(), 2)
        sys.stdout = _text_stream(1)
        sys.stderr = _text_stream(2)
        try:
            with _piped_consoles():
                yield got
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            got.stdout = _read(out_f)
            got.stderr = _read(err_f)


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", write_through=True)


def _read(f) -> str:
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _piped_consoles() -> Iterator[None]:
    """dlbench's rich consoles as a piped child has them: 200 columns, no colour (they were
    made at import, when pytest's capture, or ``-s``'s terminal, was their stream)."""
    from dlbench.report import terminal
    consoles = (terminal.stdout, terminal.stderr)
    saved = [(c._width, c._color_system, c._force_terminal) for c in consoles]
    for c in consoles:
        c._width, c._color_system, c._force_terminal = 200, None, None
    try:
        yield
    finally:
        for c, (w, colour, force) in zip(consoles, saved):
            c._width, c._color_system, c._force_terminal = w, colour, force


#: Python's own warning filters for a fresh interpreter without -W (``python -m``), most
#: specific first: a warning shows once per place on stderr, as it would in a child.
_DEFAULT_FILTERS = (("default", DeprecationWarning, "__main__"),
                    ("ignore", DeprecationWarning, ""), ("ignore", PendingDeprecationWarning, ""),
                    ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, ""))


@contextlib.contextmanager
def _isolated(cwd, env: dict[str, str], stdin: str | None) -> Iterator[None]:
    import tempfile

    import torch
    old_cwd, old_env, old_stdin = os.getcwd(), dict(os.environ), sys.stdin
    old_tempdir = tempfile.tempdir  # gettempdir() reads TMPDIR once, then keeps what it found
    old_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    old_torch = (torch.get_num_threads(), torch.get_float32_matmul_precision(),
                 torch.backends.cudnn.benchmark, torch.get_default_dtype(),
                 torch.is_grad_enabled(), torch.get_rng_state())
    old_path = list(sys.path)
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for action, category, module in reversed(_DEFAULT_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _show_on_stderr
            if cwd is not None:
                os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            tempfile.tempdir = None  # the call's TMPDIR, as a child would find it
            sys.stdin = io.StringIO(stdin or "")  # under pytest a child's stdin is empty too
            yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        tempfile.tempdir = old_tempdir
        sys.stdin = old_stdin
        sys.path[:] = old_path
        for s, h in old_signals.items():
            if h is not None:
                signal.signal(s, h)
        threads, matmul, bench, dtype, grad, rng = old_torch
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.benchmark = bench
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_rng_state(rng)


def _show_on_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def script(name: str):
    """``benchmarks/NAME.py`` loaded as a module (a script, not in a package), so that a test
    can call its ``main`` in this process: for what its parser refuses, before any work. A
    NAME with a slash is a path from the repository root (``tools/headline.py``)."""
    import importlib.util
    root = Path(SRC).parent
    path = root / name if "/" in name else root / "benchmarks" / f"{name}.py"
    module_name = "_".join(path.relative_to(root).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # as an import does: dataclasses look their module up
    spec.loader.exec_module(module)
    return module
