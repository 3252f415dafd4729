"""A server started as its users start it (``dlbench serve --launch "CMD"``): the command in a
shell of its own process group, its output to a log file, polled until it answers, ended with
everything it started.

- **Health**: ``GET BASE/health``, then ``GET BASE/v1/models``, every ``poll_s``; the first
  200 from either is healthy (``transformers serve`` answers ``/health`` and may fail
  ``/v1/models``; vLLM and SGLang answer both once the model is loaded). A command that exits
  first, or no answer within ``timeout_s``, is a :class:`ServerStartError` naming the command,
  the URL and the last lines of its log.
- **Ending it**: :func:`dlbench.launch.signals.stop`: SIGTERM to its process group, SIGKILL
  after a grace period, every descendant that left the group too; on the way out of
  :func:`launched`, whatever the way (the run's end, an error, Ctrl-C, SIGTERM or SIGHUP, which
  dlbench turns into Ctrl-C). If dlbench itself is killed with SIGKILL, the shell gets SIGTERM
  from the kernel (PR_SET_PDEATHSIG on Linux) and passes it to its whole process group
  (:data:`SHELL`): the signal is not inherited across a fork, and not every ``/bin/sh``
  replaces itself with a lone command (dash, Debian's, forks it).

Only processes and URLs here: no client library (the health poll is urllib).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from dlbench.config import ConfigError
from dlbench.launch import signals, tempdirs

#: How long a launched server gets to answer (``--launch-timeout``): an 8B model's load and
#: CUDA graph capture take minutes.
HEALTH_TIMEOUT_S = 600.0
HEALTH_PATHS = ("/health", "/v1/models")
POLL_S = 0.5
#: Lines of the server's log quoted in an error.
TAIL_LINES = 5


class ServerStartError(ConfigError):
    """The launched server exited, or did not answer in time: nothing was measured."""


@dataclass
class ServerProcess:
    command: str
    base_url: str
    proc: subprocess.Popen
    log_path: Path
    keep_log: bool
    ready_s: float | None = None  # seconds from start to healthy
    health: str | None = None      # the URL that answered first

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def tail(self, lines: int = TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def info(self) -> dict[str, object]:
        """What a record says of how its server was started."""
        return {"launch": self.command, "ready_s": self.ready_s, "health": self.health,
                "log": str(self.log_path) if self.keep_log else None}


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of a log, joined with `` | `` (one line)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


#: How a server command runs: in the background of a shell that, on SIGTERM, sends SIGTERM to
#: its process group (the command and everything it started) and then dies itself. The newline
#: ends a command whose last line is a comment.
SHELL = "trap 'trap - TERM; kill -TERM 0' TERM; ( {command}\n) & wait $!"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGTERM to the child when dlbench dies, however it dies (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def start(command: str, base_url: str, log_path: str | None = None) -> ServerProcess:
    """Start ``command`` in a shell of its own session; its output goes to ``log_path`` (if
    None, a temporary file in dlbench's folder (:mod:`dlbench.launch.tempdirs`), removed when
    the server is stopped, or with the folder if dlbench is killed first)."""
    if log_path:
        path, keep = Path(log_path), True
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        fd, name = tempfile.mkstemp(prefix="dlbench-serve-", suffix=".log", dir=tempdirs.root())
        os.close(fd)
        path, keep = Path(name), False
    with open(path, "ab") as log:
        proc = subprocess.Popen(["/bin/sh", "-c", SHELL.format(command=command)],
                                stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)
    return ServerProcess(command, base_url.rstrip("/"), proc, path, keep)


def _answers(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(server: ServerProcess, timeout_s: float = HEALTH_TIMEOUT_S,
                 poll_s: float = POLL_S) -> None:
    """Poll until the server answers; :class:`ServerStartError` if it exits or times out."""
    t0 = time.monotonic()
    base = server.base_url[:-3] if server.base_url.endswith("/v1") else server.base_url
    while True:
        for path in HEALTH_PATHS:
            if _answers(base + path, min(2.0, poll_s * 4)):
                server.ready_s, server.health = round(time.monotonic() - t0, 3), base + path
                return
        code = server.exit_code()
        if code is not None:
            tail = server.tail()
            raise ServerStartError(
                f"the server command exited with code {code} before it answered on {base}"
                f"/health or /v1/models: {server.command!r}"
                + (f"; the last lines of its output: {tail}" if tail else "; it printed nothing"))
        if time.monotonic() - t0 > timeout_s:
            tail = server.tail()
            raise ServerStartError(
                f"the server did not answer on {base}/health or /v1/models within "
                f"{timeout_s:g} s (--launch-timeout): {server.command!r}; is the endpoint's port "
                f"the one it listens on?" + (f" The last lines of its output: {tail}"
                                             if tail else ""))
        time.sleep(poll_s)


def stop(server: ServerProcess) -> None:
    """End the server and everything it started; its log goes unless it was asked for."""
    signals.stop([server.proc])
    if not server.keep_log:
        with contextlib.suppress(OSError):
            server.log_path.unlink()


@contextlib.contextmanager
def launched(command: str, base_url: str, timeout_s: float = HEALTH_TIMEOUT_S,
             log_path: str | None = None) -> Iterator[ServerProcess]:
    """The server of ``command``, healthy, for the duration of the block; stopped on the way
    out, however the block ends (and while it starts: an interrupt during the health wait)."""
    server = start(command, base_url, log_path)
    try:
        wait_healthy(server, timeout_s)
        yield server
    finally:
        stop(server)
