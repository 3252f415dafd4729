"""SIGTERM and SIGHUP end dlbench the way Ctrl-C does, and the processes it started end with it.

A batch system stops a job with SIGTERM (Slurm, Kubernetes, systemd, ``timeout``) and a closed
terminal sends SIGHUP; by default either kills Python outright, so no ``finally`` runs: ranks and
``--isolate`` workers go on computing, the run reads "running" forever and temporary folders
stay. :func:`install` turns both into :class:`KeyboardInterrupt`, the one path Ctrl-C already
takes (records so far kept, the run marked interrupted, exit code 130). A signal that was ignored
when dlbench started (``nohup`` ignores SIGHUP) stays ignored. Every signal (Ctrl-C too) is
noted, so that one that lands inside an import and is lost there still ends the command:
:func:`check` raises it again before a run starts or a config is measured.

:func:`stop` ends the children: SIGTERM to each one's process group, SIGKILL after a grace
period, every one reaped; the descendants that left the group (torchrun starts each rank in a
session of its own) are ended too. :func:`exit_with_parent` ends a child whose parent was killed
with SIGKILL, which no handler can catch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Callable, Iterator, Sequence

from dlbench.env import process_alive as _alive
from dlbench.launch import tempdirs

#: What is handled like Ctrl-C, besides SIGINT itself.
SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: After SIGTERM, how long a child's process group gets before SIGKILL.
STOP_GRACE_S = 3.0
#: How often a child looks whether its parent is still there.
PARENT_POLL_S = 0.5
_POLL_S = 0.02
#: The parent a child of dlbench watches (set by :func:`child_env`).
PARENT_ENV = "DLBENCH_PARENT_PID"
#: Keeps the working directory off a child's ``sys.path`` (set by :func:`child_env`).
SAFE_PATH_ENV = "PYTHONSAFEPATH"


#: Signals received while :func:`install`'s handlers were in place (their names), and how many
#: installs are in force: what :func:`check` and :func:`interrupted` read.
_received: list[str] = []
_installs = 0


def _interrupt(signum: int, frame) -> None:
    # Python runs handlers in the main thread, between bytecodes: this unwinds like Ctrl-C.
    # It is noted first: a KeyboardInterrupt raised inside an import can be swallowed by C code
    # there (torch's numpy start-up clears it), or turned into another error later (numpy then
    # refuses a second import), and the note lets dlbench end as interrupted all the same.
    _received.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install() -> Callable[[], None]:
    """Handle SIGTERM and SIGHUP like Ctrl-C in this process, and note every one of them and
    every Ctrl-C (:func:`interrupted`); returns a function that puts the previous handlers
    back. Outside the main thread it does nothing (Python allows handlers only there). A signal
    set to be ignored (``nohup``) or handled by someone else is left alone."""
    global _installs
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {}
    for sig in SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            old[sig] = signal.signal(sig, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Python's Ctrl-C
        old[signal.SIGINT] = signal.signal(signal.SIGINT, _interrupt)
    if _installs == 0:
        _received.clear()
    _installs += 1

    def restore() -> None:
        global _installs
        _installs -= 1
        for sig, handler in old.items():
            if signal.getsignal(sig) is _interrupt:
                signal.signal(sig, handler)
    return restore


def interrupted() -> str | None:
    """The first signal (``SIGINT``, ``SIGTERM``, ``SIGHUP``) received since the handlers were
    last installed, or None: whether an error that follows is really an interruption."""
    return _received[0] if _received else None


def check() -> None:
    """Raise KeyboardInterrupt if a signal came while the handlers are in force: a checkpoint
    before work starts (a run opened, a config measured), so that a Ctrl-C swallowed on the way
    (inside an import) still ends the command as interrupted, not after the whole sweep."""
    if _installs > 0 and _received:
        raise KeyboardInterrupt(_received[0])


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """:func:`install` for the duration of a block."""
    restore = install()
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while children are being ended: a second Ctrl-C must not
    cut the clean-up short; the held signal arrives once the block is over."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *SIGNALS})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _descendants(pid: int) -> list:
    try:
        import psutil
        return psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - gone already, or no psutil: the group is what is left
        return []


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # started with start_new_session: its pid is its group's
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def stop(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """End ``procs`` (each started with ``start_new_session=True``) and everything they
    started: SIGTERM to each process group, SIGKILL to what is left after ``grace_s``; each of
    ``procs`` is reaped before this returns. Signals to this process wait until it is done."""
    with deferred():
        live = [p for p in procs if p.poll() is None]
        below = [d for p in live for d in _descendants(p.pid)]
        for p in live:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(_POLL_S)
        for p in live:
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
        for p in live:
            p.wait()
        # Ranks in sessions of their own, which a killed torchrun could not stop.
        for d in below:
            try:
                if d.is_running():
                    d.kill()
            except Exception:  # noqa: BLE001 - gone in the meantime
                pass


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a Python child of dlbench (a worker, the zygote, torchrun's agent and,
    through it, every rank).

    It names this process, so that a child that calls :func:`exit_with_parent` ends too when its
    parent died while it was still starting. And it sets ``PYTHONSAFEPATH=1`` (Python 3.11+,
    what ``python -P`` does, but inherited by the grandchildren torchrun starts): ``python -m``
    would otherwise put the working directory first on ``sys.path``, where a ``json.py`` or a
    ``dataclasses.py`` lying in it would be imported, and run, instead of the standard library's.
    Its ``TMPDIR`` is this process's folder (:mod:`dlbench.launch.tempdirs`), removed when this
    process exits, so that nothing a child leaves in a temporary folder outlives the run.
    """
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid()),
            SAFE_PATH_ENV: "1", **tempdirs.child_tmp_env()}


def exit_with_parent() -> None:
    """End this process when its parent dies (a dlbench or torchrun agent killed with SIGKILL
    would otherwise leave it computing): when it is re-parented, or when the process that
    :func:`child_env` named is gone; the latter also catches a parent that died while this one
    was still starting (imports take seconds) and a parent behind a wrapper (``ip netns exec``)."""
    named = os.environ.get(PARENT_ENV, "")
    parent = int(named) if named.isdigit() else None
    first = os.getppid()

    def gone() -> bool:
        return os.getppid() != first or (parent is not None and not _alive(parent))

    def watch() -> None:
        while not gone():
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


