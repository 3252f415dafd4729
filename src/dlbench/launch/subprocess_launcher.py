"""Run each benchmark in a fresh Python process (``--isolate``).

A fresh process per benchmark means a fatal CUDA error, a leak or a fragmented allocator cannot
touch the next benchmark, and each process autotunes afresh (``--repeat``'s run-to-run spread).
The price is its start-up, outside every measured window: PyTorch workers are forked by a zygote
that imported torch and the model libraries once (:mod:`dlbench.launch.zygote` says why that is
still a fresh process for the GPU), which saves seconds of imports per process; JAX workers, and
every worker where ``DLBENCH_SPAWN=1`` is set or the OS has no ``fork``, start a new interpreter
(``python -m dlbench.launch.worker``). Either child gets the config as JSON and writes the record
as JSON to a file the parent names; the parent alone talks to the store. The launcher is handed
the worker of each record kind as a function and sends it to the child by name
(:func:`dlbench.launch.lookup.worker_name`), which imports it there.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping

from dlbench.launch import signals, tempdirs
from dlbench.launch.lookup import worker_name
from dlbench.records import Record, record_from_dict, record_type_for
from dlbench.records.base import ErrorType


class SubprocessLauncher:
    name = "subprocess"
    survives_fatal = True

    def __init__(self, workers: Mapping[str, Callable[..., Record]],
                 timeout_s: float | None = 1800.0, count_flops: bool = True,
                 idle_baseline: bool = True) -> None:
        """``workers`` maps a record kind to the function that measures one config of that
        kind in the child, as :class:`~dlbench.launch.inline.InlineLauncher` takes them; each
        must be importable by its name there (checked here, by
        :func:`~dlbench.launch.lookup.worker_name`). ``count_flops=False`` leaves the record's
        FLOPs out: counting traces the model once more, seconds per process, which a memory
        probe does not need. ``idle_baseline=False`` skips the wait for the GPU's idle power
        before the benchmark (up to 6 s)."""
        self.workers = dict(workers)
        self._names = {kind: worker_name(fn) for kind, fn in self.workers.items()}
        self.timeout_s = timeout_s
        self.count_flops = count_flops
        self.idle_baseline = idle_baseline

    def for_later_processes(self) -> "SubprocessLauncher":
        """The same launcher for the later processes of a repeat group: they take the first
        process's FLOP count (one model, one count) and its idle power (one card, one
        baseline), so that a group costs its windows, not seconds of waiting per process."""
        return SubprocessLauncher(self.workers, self.timeout_s, count_flops=False,
                                  idle_baseline=False)

    def run(self, cfg: Any, env: dict) -> Record:
        with tempfile.TemporaryDirectory(prefix="dlbench-", dir=tempdirs.root()) as tmp:
            out_path = os.path.join(tmp, "record.json")
            kind = record_type_for(cfg).kind
            if kind not in self._names:
                return self._failed(cfg, env, ErrorType.EXCEPTION,
                                    f"this launcher was given no worker for {kind} configs (it "
                                    f"has {', '.join(sorted(self._names)) or 'none'})")
            job = {"kind": kind, "worker": self._names[kind], "config": cfg.to_dict(),
                   "env": env, "out": out_path, "count_flops": self.count_flops,
                   "idle_baseline": self.idle_baseline}
            try:
                returncode, stderr = (self._forked if _forks(cfg) else self._spawned)(job)
            except TimeoutError:
                return self._failed(cfg, env, ErrorType.TIMEOUT,
                                    f"the worker ran past {self.timeout_s:.0f} s and was killed")
            except ZygoteLost as e:
                return self._failed(cfg, env, ErrorType.CRASHED, str(e))
            if os.path.exists(out_path):
                with open(out_path) as f:
                    return record_from_dict(json.load(f))
            return self._failed(cfg, env, ErrorType.CRASHED,
                                f"worker exited with code {returncode} and wrote no result; "
                                f"its stderr ends:\n{stderr}")

    def _spawned(self, job: dict) -> tuple[int, str]:
        """``job`` in a new interpreter: its exit code and the end of its stderr."""
        # A session of its own: stopping it reaches everything it started, and a Ctrl-C at the
        # terminal reaches dlbench alone, which ends the worker itself.
        with subprocess.Popen(
                [sys.executable, "-m", "dlbench.launch.worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=signals.child_env(), start_new_session=True) as proc:
            try:
                _, stderr = proc.communicate(json.dumps(job), timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                signals.stop([proc])
                raise TimeoutError from None
            except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: no worker outlives dlbench
                signals.stop([proc])
                raise
        return proc.returncode, stderr[-2000:]

    def _forked(self, job: dict) -> tuple[int, str]:
        """``job`` in a child of the zygote: its exit code and the end of its stderr."""
        returncode = Zygote.shared().run(job, self.timeout_s)
        return returncode, _tail(job["out"] + ".stderr")

    @staticmethod
    def _failed(cfg: Any, env: dict, kind: str, msg: str) -> Record:
        return record_type_for(cfg)(config=cfg, env=env, status="error", error_type=kind,
                                    error=msg)


def _forks(cfg: Any) -> bool:
    """Whether this config's worker is forked by the zygote (else a new interpreter)."""
    return (hasattr(os, "fork") and getattr(cfg, "framework", "torch") != "jax"
            and os.environ.get("DLBENCH_SPAWN", "") in ("", "0"))


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


class ZygoteLost(RuntimeError):
    """The zygote ended or broke its protocol; the job it held is lost (not the sweep)."""


class Zygote:
    """The parent's handle on one :mod:`dlbench.launch.zygote` process, shared by every launcher
    of this dlbench process (started at the first forked job, ended at exit)."""

    _shared: "Zygote | None" = None

    @classmethod
    def shared(cls) -> "Zygote":
        if cls._shared is None or cls._shared.proc.poll() is not None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        self._errors = tempfile.TemporaryFile(prefix="dlbench-zygote-", dir=tempdirs.root())
        env = signals.child_env({**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dlbench.launch.zygote"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._errors, env=env, start_new_session=True)
        self._buffer = b""
        atexit.register(self.close)

    def run(self, job: dict, timeout_s: float | None) -> int:
        """Run ``job`` in a forked child; its exit code. Raises TimeoutError (the child was
        ended), ZygoteLost, or what interrupted the wait (the child ended first)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            self.proc.stdin.write((json.dumps({**job, "environ": signals.child_env()})
                                   + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise self._lost(f"could not send it the job ({e})") from None
        try:  # the zygote's imports for a library's first job count against the timeout
            pid = self._read(deadline)["pid"]
        except BaseException:  # no pid to end: the zygote goes, a child it forked follows it
            self.close()
            raise
        try:
            return self._read(deadline)["returncode"]
        except BaseException:  # the timeout, Ctrl-C, SIGTERM, SIGHUP: no worker outlives it
            self._end_child(pid)
            raise

    def _read(self, deadline: float | None) -> dict:
        """The zygote's next answer line, waiting until ``deadline`` at most."""
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise self._lost("it ended")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise self._lost(f"it answered {line[:200]!r}") from None

    def _lost(self, why: str) -> ZygoteLost:
        self.close()
        self._errors.seek(0)
        tail = self._errors.read()[-2000:].decode(errors="replace")
        return ZygoteLost(f"the zygote that forks the workers was lost: {why}; its stderr "
                          f"ends:\n{tail}")

    def _end_child(self, pid: int) -> None:
        """SIGTERM to the child's process group, SIGKILL after the grace; waits for the
        zygote to see it end (or ends the zygote too). Signals to dlbench wait meanwhile."""
        with signals.deferred():
            for sig, wait_s in ((signal.SIGTERM, signals.STOP_GRACE_S), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    self._read(time.monotonic() + wait_s)
                    return
                except TimeoutError:
                    continue
                except ZygoteLost:
                    return
            self.close()

    def close(self) -> None:
        """End the zygote (and with it any child still running: it ends with its parent)."""
        if self.proc.poll() is None:
            signals.stop([self.proc], grace_s=1.0)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
